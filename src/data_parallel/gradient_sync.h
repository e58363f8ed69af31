#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data_parallel/gradient_buckets.h"
#include "data_parallel/sharded_reduction.h"
#include "pipetrain/data_parallel/zero_config.h"
#include "pipetrain/device/transport.h"
#include "pipetrain/groups/communicators.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::data_parallel {

// Makes every copy of a parameter see the same gradient before the optimizer steps, the one
// owner of every gradient's movement among replicas: tied parameters summed among the
// stages that own them, then every gradient averaged over the data-parallel replicas in
// flat buckets (GradientBuckets), with `overlap` while the step's last backward passes run;
// under ZeRO reduce-scattered onto the shards instead (ShardedReduction, whose pieces the
// optimizer's masters take). Experts split over ranks are averaged apart. Also knows which
// gradients this rank counts in the global gradient norm, so that tied and replicated
// tensors count once.
class GradientSync {
 public:
  // How the data-parallel average is made (see GradientBuckets).
  struct DataParallel {
    ZeroConfig zero{};  // stage 1 to 3: reduce-scattered onto the shards
    int64_t bucket_elements = 25'000'000;
    at::ScalarType wire = at::kFloat;  // the dtype gradients travel in
    bool overlap = false;              // during the last backward passes
  };
  // Over `comms`' tied groups (Communicators::connect_tied first, where the module has
  // tied layers) and its data-parallel communicator; the gradients live on its device.
  GradientSync(const module::PipelineModule& module, const groups::Communicators& comms,
               DataParallel data_parallel);

  void reduce_tied();

  // A training step begins (forgetting one that threw); its last backward passes begin;
  // a backward (or weight-gradient) pass has ended (see GradientBuckets; under ZeRO 2 and 3
  // each pass's gradients are reduce-scattered then and freed).
  void begin_step();
  void begin_last_backwards();
  void after_backward();
  void reduce_data_parallel();
  // Null at data-parallel size 1.
  const GradientBuckets* buckets() const { return buckets_.get(); }
  // Under ZeRO, the reductions onto the shards (for the optimizer's masters); else null.
  const ShardedReductions& sharded() const { return sharded_; }
  // Under ZeRO stage 3, where the parameters live (the dense reduction's); else null.
  std::shared_ptr<ShardedParameters> sharded_parameters() const {
    return sharded_.dense ? sharded_.dense->sharded_parameters() : nullptr;
  }
  // Per module parameter: whether its gradient changes after backward (a tied one, summed
  // among its stages by reduce_tied()).
  const std::vector<bool>& late() const { return late_; }
  // Parameters split over the expert-parallel group (an MoE layer's experts): not in the
  // buckets, reduced over the ranks holding the same experts by reduce_data_parallel().
  const std::vector<at::Tensor>& expert_parameters() const { return experts_.parameters; }

  // The module's parameters whose gradients this rank counts in the global norm: all but
  // tied tensors whose first owner is another stage and, under tensor parallelism,
  // replicated tensors on every rank of the group but the first.
  const std::vector<at::Tensor>& norm_parameters() const { return norm_parameters_; }

 private:
  void choose_norm_parameters(const std::vector<at::Tensor>& counted_elsewhere);
  // Under ZeRO: the reductions of the dense parameters and (where several ranks hold the
  // same experts) of the experts.
  void shard(const DataParallel& data_parallel);
  void reduce_with(std::shared_ptr<BucketReduction> reduction);
  void reduce_experts();
  // The ZeRO reductions there are (none, the dense one, or both).
  std::vector<ShardedReduction*> sharded_reductions() const;

  const module::PipelineModule& module_;
  std::shared_ptr<const topology::Grid> grid_;
  std::shared_ptr<comm::Communicator> data_;
  std::map<std::string, std::shared_ptr<comm::Communicator>> tied_comms_;
  std::vector<at::Tensor> norm_parameters_;
  std::vector<bool> late_;
  // Some of the module's parameters, with each one's late_ and layer.
  struct Part {
    std::vector<at::Tensor> parameters;
    std::vector<bool> late;
    std::vector<int> layers;
  };
  Part averaged_;  // in the buckets: every parameter but the experts'
  Part experts_;   // split over the expert-parallel group
  bool overlap_ = false;
  std::unique_ptr<GradientBuckets> buckets_;
  ShardedReductions sharded_;
};

}  // namespace pipetrain::data_parallel
