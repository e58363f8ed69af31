#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/comm/communicator.h"
#include "pipetrain/comm/deadline.h"
#include "pipetrain/comm/transport_choice.h"
#include "pipetrain/context_parallel/ring_attention.h"
#include "pipetrain/device/device_choice.h"
#include "pipetrain/device/transport.h"
#include "pipetrain/expert_parallel/all_to_all.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/tensor_parallel/group.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::groups {

// Which group a tensor communicator serves.
enum class TensorGroup { kModel, kData, kExperts, kContext, kTied, kPipePair };

// For tests that hold the code to NCCL's rules on the CPU: what every tensor communicator
// Communicators makes passes through (a recording or checking wrapper), and whether each
// lane of the pipe gets a communicator of its own for payloads, as NCCL lanes have, even
// where it is MPI.
struct CommunicatorTesting {
  std::function<std::shared_ptr<comm::Communicator>(std::shared_ptr<comm::Communicator>,
                                                    TensorGroup)>
      wrap;
  bool pair_links = false;
};

// Every communicator of a job, and which transport each group's tensors take. Each one is
// made here and nowhere else, in this order on every rank (each making is collective):
//   1. the grid's MPI communicators, one per axis (made with the Grid), get the job's
//      deadline: NCCL communicators made from them copy it;
//   2. this rank is placed on its device (device::place_rank);
//   3. the tensor-parallel group's tensor communicator;
//   4. the data-parallel group's, then the expert-parallel group's (where experts are split),
//      then the context-parallel group's (where sequences are split);
//   5. connect_tied: one group per tied key among the stages owning it;
//   6. connect_pipe: the pipe's lanes, per pair of stages that exchange payloads.
// Steps 3, 4 (with the expert and context groups) and 5 take NCCL where every rank of the
// group has a GPU of its own, else the MPI communicator (device::communicator_for); step 6 chooses
// per pair of stages, over the lanes the engine's plans need (schedule::pipe_lanes). Who may start
// a collective follows the transport: data-parallel buckets start on autograd's device thread only
// over NCCL (Communicator::starts_from_any_thread; over host-staged MPI the engine's thread starts
// them, between instructions).
//
// What stays on MPI, always: the grid's axes (control()) carry the step's host scalars
// (loss, gradient-norm sums, the fp16 overflow flag), barriers, transfer headers, the
// tensor-parallel group's micro-batch broadcast, partitioned-transfer all-gathers, the logits
// gathers of `logits`/`generate`, and tensor-parallel checkpoint gathers (ZeRO's gathers
// take data()).
class Communicators {
 public:
  // Steps 1 to 4. `timeout` zero leaves the grid's deadlines as they are.
  Communicators(std::shared_ptr<topology::Grid> grid, device::DeviceKind device,
                comm::Seconds timeout, CommunicatorTesting testing = {});
  // Releases the communicators in one order on every rank: pipe links, tied groups (by
  // key), context, experts, data, tensor (NCCL's teardown of a communicator may wait for its
  // peers'); the pipe's lanes go in one order on both ends of each pair.
  ~Communicators();
  Communicators(const Communicators&) = delete;
  Communicators& operator=(const Communicators&) = delete;

  const std::shared_ptr<topology::Grid>& grid() const { return grid_; }
  // The grid's MPI communicators: host-side scalars and everything listed above.
  const topology::Grid& control() const { return *grid_; }
  at::Device device() const { return device_; }

  // The collectives inside the model's tensor-parallel layers.
  tensor_parallel::Group tensor_group() const { return {tensor_}; }
  // Gradient buckets among data-parallel replicas (all-reduce; ZeRO's reduce-scatter and
  // all-gather of the shards).
  const std::shared_ptr<comm::Communicator>& data() const { return data_; }
  // The rows an MoE layer sends its experts and back (all-to-all) among the expert-parallel
  // group; the row counts stay on the grid's MPI communicator. Null without expert
  // parallelism.
  expert_parallel::Group experts_group() const;
  // The ring of context parallelism: attention's key/value blocks passed around, and the
  // positions gathered. Null (no parallelism) without a context axis.
  context_parallel::Group context_group() const { return {context_}; }

  // Step 5, once, after step 4: for each tied key `module` owns on two stages or more, a
  // communicator among those stages that share this rank's data and tensor coordinates.
  // Every rank of the job takes part for every key.
  void connect_tied(const module::PipelineModule& module);
  // This rank's tied-layer groups by key (only the keys it owns).
  const std::map<std::string, std::shared_ptr<comm::Communicator>>& tied() const { return tied_; }

  // Step 6, once, after step 5 (where there is one): the links to the stages this rank
  // exchanges payloads with. With `lanes` (the same on every rank), by device::pipe_links:
  // NCCL between stages on GPUs of their own, a communicator per lane (NCCL matches
  // transfers by their order alone, and the lanes are where the plans keep it:
  // schedule::pipe_lanes); else, and without lanes, every payload over MPI.
  void connect_pipe(const std::optional<std::vector<schedule::PipeLane>>& lanes);
  const std::map<int, device::PipeLink>& pipe_links() const { return pipe_links_; }

  // For the job line: "pipe mpi, data-parallel nccl", with the pipe's per stage where its
  // neighbours differ ("pipe nccl to stage 1, mpi to stage 3"), tied and tensor-parallel
  // groups where the job has them.
  std::string describe() const;
  comm::Transport data_transport() const { return data_->transport(); }
  // Whether any group of this rank's moves tensors over NCCL.
  bool uses_nccl() const;
  // Whether a lane of this rank's pipe is NCCL's.
  bool pipe_uses_nccl() const;
  // How payloads travel between stages: "nccl" or "mpi" when alike (also without
  // neighbours: "mpi"), else per stage, e.g. "nccl to stage 1, mpi to stage 3".
  std::string pipe_transports() const;

 private:
  enum class Made { kGroups, kTied, kPipe };
  void expect(bool in_order, const char* step);  // std::logic_error unless in order
  // The pipe's lanes, in one order on both ends of each pair (teardown may wait for the
  // peer's).
  void release_pipe_lanes();

  std::shared_ptr<comm::Communicator> wrapped(std::shared_ptr<comm::Communicator> made,
                                              TensorGroup group) const;

  std::shared_ptr<topology::Grid> grid_;
  CommunicatorTesting testing_;
  at::Device device_;
  std::shared_ptr<comm::Communicator> tensor_;
  std::shared_ptr<comm::Communicator> data_;
  std::shared_ptr<comm::Communicator> experts_;  // null without expert parallelism
  std::shared_ptr<comm::Communicator> context_;  // null without context parallelism
  std::map<std::string, std::shared_ptr<comm::Communicator>> tied_;
  std::map<int, device::PipeLink> pipe_links_;
  Made made_ = Made::kGroups;
};

}  // namespace pipetrain::groups
