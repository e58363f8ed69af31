#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/data_parallel/gradient_buckets.h"
#include "pipetrain/device/transport.h"
#include "pipetrain/groups/communicators.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::data_parallel {

// Makes every copy of a parameter see the same gradient before the optimizer steps:
// tied parameters summed among the stages that own them, then every gradient averaged
// over the data-parallel replicas in flat buckets (GradientBuckets), with `overlap` while
// the step's last backward passes run. Also knows which gradients this rank counts in the
// global gradient norm, so that tied and replicated tensors count once.
class GradientSync {
 public:
  // How the data-parallel average is made (see GradientBuckets).
  struct DataParallel {
    bool averages = true;  // false under ZeRO: its reduction comes by reduce_with()
    int64_t bucket_elements = 25'000'000;
    at::ScalarType wire = at::kFloat;  // the dtype gradients travel in
    bool overlap = false;              // during the last backward passes
  };
  // Over `comms`' tied groups (Communicators::connect_tied first, where the module has
  // tied layers) and its data-parallel communicator; the gradients live on its device.
  GradientSync(const module::PipelineModule& module, const groups::Communicators& comms,
               DataParallel data_parallel);

  void reduce_tied();
  // Under ZeRO: the buckets are the optimizer's, reduce-scattered onto its shards.
  void reduce_with(std::shared_ptr<BucketReduction> reduction);

  // A training step begins (forgetting one that threw); its last backward passes begin;
  // a backward pass has ended (see GradientBuckets).
  void begin_step();
  void begin_last_backwards();
  void after_backward();
  void reduce_data_parallel();
  // Null at data-parallel size 1 (and under ZeRO before reduce_with()).
  const GradientBuckets* buckets() const { return buckets_.get(); }
  // Per module parameter: whether its gradient changes after backward (a tied one, summed
  // among its stages by reduce_tied()).
  const std::vector<bool>& late() const { return late_; }
  // Parameters split over the expert-parallel group (an MoE layer's experts): not in the
  // buckets, reduced over the ranks holding the same experts by reduce_data_parallel().
  const std::vector<at::Tensor>& expert_parameters() const { return experts_; }

  // The module's parameters whose gradients this rank counts in the global norm: all but
  // tied tensors whose first owner is another stage and, under tensor parallelism,
  // replicated tensors on every rank of the group but the first.
  const std::vector<at::Tensor>& norm_parameters() const { return norm_parameters_; }

 private:
  void choose_norm_parameters(const std::vector<at::Tensor>& counted_elsewhere);
  void reduce_experts();

  const module::PipelineModule& module_;
  std::shared_ptr<const topology::Grid> grid_;
  std::shared_ptr<comm::Communicator> data_;
  std::map<std::string, std::shared_ptr<comm::Communicator>> tied_comms_;
  std::vector<at::Tensor> norm_parameters_;
  std::vector<bool> late_;
  std::vector<at::Tensor> averaged_;  // in the buckets: every parameter but the experts'
  std::vector<bool> averaged_late_;   // late_ of each
  std::vector<at::Tensor> experts_;   // split over the expert-parallel group
  bool overlap_ = false;
  // Under ZeRO with several ranks holding the same experts (experts_reduce_scattered):
  // reduce_data_parallel() only scales the experts' gradients, which the reduce-scatter
  // onto the optimizer's expert shards then averages over those ranks.
  bool expert_sums_elsewhere_ = false;
  std::unique_ptr<GradientBuckets> buckets_;
};

}  // namespace pipetrain::data_parallel
