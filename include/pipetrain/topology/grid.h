#pragma once

#include <memory>
#include <utility>

#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/topology/parallel_layout.h"
#include "pipetrain/topology/process_topology.h"

namespace pipetrain::topology {

// This rank's place in a pipe x data (x context) (x model) topology and the communicators
// along each axis. Axes the topology lacks have size 1. Building a Grid is collective over
// `world`.
//
// Two groups span two axes. The replicas of this rank's parameters are its data x context
// ranks (context-parallel ranks hold the same layers and compute parts of the same
// samples: gradients, ZeRO shards and losses are averaged over them); the ranks computing
// this rank's samples are its context x model ranks (one of them reads each micro-batch).
// Without a context axis they are the data and the model group.
//
// Expert parallelism carves groups of `expert_parallel` consecutive data-parallel ranks
// out of the data axis (Megatron's expert-model-parallel group): each holds a share of
// every MoE layer's experts. The ranks holding the same experts, one per such group, are
// the expert-data-parallel group.
class Grid {
 public:
  // Throws InputError if the topology does not cover exactly the world's ranks, or if
  // `expert_parallel` does not divide the data-parallel size.
  Grid(ProcessTopology topology, std::shared_ptr<comm::MpiCommunicator> world,
       int expert_parallel = 1);
  // The grid of a resolved layout (resolve_layout) over its make_topology().
  Grid(const ParallelLayout& layout, std::shared_ptr<comm::MpiCommunicator> world)
      : Grid(make_topology(layout), std::move(world), static_cast<int>(layout.expert)) {}

  const ProcessTopology& topology() const { return topology_; }
  int global_rank() const { return world_->rank(); }
  int world_size() const { return world_->size(); }

  int stage_id() const { return coordinate("pipe"); }
  int pipe_parallel_size() const { return size("pipe"); }
  int data_parallel_id() const { return coordinate("data"); }
  int data_parallel_size() const { return size("data"); }
  // The slice rank within the tensor-parallel group (the topology's "model" axis, as
  // DeepSpeed names it in its topologies and checkpoints).
  int tensor_parallel_id() const { return coordinate("model"); }
  int tensor_parallel_size() const { return size("model"); }
  // The slice of each sequence this rank holds, within the context-parallel group.
  int context_parallel_id() const { return coordinate("context"); }
  int context_parallel_size() const { return size("context"); }
  // Within data x context: data-major.
  int replica_id() const {
    return data_parallel_id() * context_parallel_size() + context_parallel_id();
  }
  int replica_count() const { return data_parallel_size() * context_parallel_size(); }
  // This rank's share of the experts, within its expert-parallel group.
  int expert_parallel_id() const { return expert_->rank(); }
  int expert_parallel_size() const { return expert_->size(); }
  bool is_first_stage() const { return stage_id() == 0; }
  bool is_last_stage() const { return stage_id() == pipe_parallel_size() - 1; }

  // Ranks along each axis, ordered by that axis's coordinate.
  const std::shared_ptr<comm::MpiCommunicator>& pipe_comm() const { return pipe_; }
  const std::shared_ptr<comm::MpiCommunicator>& data_comm() const { return data_; }
  const std::shared_ptr<comm::MpiCommunicator>& tensor_comm() const { return tensor_; }
  const std::shared_ptr<comm::MpiCommunicator>& context_comm() const { return context_; }
  // data x context, ordered by replica_id().
  const std::shared_ptr<comm::MpiCommunicator>& replica_comm() const { return replica_; }
  // context x model, ordered context-major; its rank 0 is context 0, model 0.
  const std::shared_ptr<comm::MpiCommunicator>& sample_comm() const { return sample_; }
  const std::shared_ptr<comm::MpiCommunicator>& world_comm() const { return world_; }
  // Consecutive data-parallel ranks splitting the experts, and the ranks holding this
  // rank's experts (data ranks equal modulo the expert-parallel size). Without expert
  // parallelism: this rank alone, and the data-parallel group.
  const std::shared_ptr<comm::MpiCommunicator>& expert_comm() const { return expert_; }
  const std::shared_ptr<comm::MpiCommunicator>& expert_data_comm() const { return expert_data_; }

  // How long every collective or transfer on the grid's communicators may wait for a peer
  // (NCCL communicators copy it when made: set it first).
  void set_timeout(comm::Seconds timeout);

  // The global rank at pipeline stage `stage` with this rank's other coordinates.
  int stage_to_global(int stage) const;

 private:
  bool has_axis(const char* axis) const;
  int coordinate(const char* axis) const;
  int size(const char* axis) const;
  std::shared_ptr<comm::MpiCommunicator> axis_comm(const char* axis) const;
  // The ranks sharing every coordinate but `first` and `second`, ordered by (first, second).
  std::shared_ptr<comm::MpiCommunicator> plane_comm(const char* first, const char* second) const;

  ProcessTopology topology_;
  std::shared_ptr<comm::MpiCommunicator> world_;
  std::shared_ptr<comm::MpiCommunicator> pipe_;
  std::shared_ptr<comm::MpiCommunicator> data_;
  std::shared_ptr<comm::MpiCommunicator> tensor_;
  std::shared_ptr<comm::MpiCommunicator> context_;
  std::shared_ptr<comm::MpiCommunicator> replica_;
  std::shared_ptr<comm::MpiCommunicator> sample_;
  std::shared_ptr<comm::MpiCommunicator> expert_;
  std::shared_ptr<comm::MpiCommunicator> expert_data_;
};

}  // namespace pipetrain::topology
