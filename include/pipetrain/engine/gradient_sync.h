#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/device/transport.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::engine {

// Makes every copy of a parameter see the same gradient before the optimizer steps:
// tied parameters summed among the stages that own them, then every gradient averaged
// over the data-parallel replicas in flat buckets. Also knows which gradients this rank
// counts in the global gradient norm, so that tied and replicated tensors count once.
class GradientSync {
 public:
  // Collective over the grid's world (one communicator per tie key is split from it).
  // `wire` is the dtype gradients are averaged in; `bucket_elements` bounds one bucket;
  // `data` carries the data-parallel average (the grid's data communicator, or NCCL over
  // the same ranks).
  GradientSync(const module::PipelineModule& module, std::shared_ptr<const topology::Grid> grid,
               std::shared_ptr<comm::Communicator> data, int64_t bucket_elements,
               at::ScalarType wire);

  // How the data-parallel average travels.
  comm::Transport transport() const { return device::transport_of(*data_); }

  void reduce_tied();
  void reduce_data_parallel();

  // The module's parameters whose gradients this rank counts in the global norm: all but
  // tied tensors whose first owner is another stage and, under tensor parallelism,
  // replicated tensors on every rank of the group but the first.
  const std::vector<at::Tensor>& norm_parameters() const { return norm_parameters_; }

 private:
  void connect_tied_layers();
  void choose_norm_parameters(const std::vector<at::Tensor>& counted_elsewhere);

  const module::PipelineModule& module_;
  std::shared_ptr<const topology::Grid> grid_;
  std::shared_ptr<comm::Communicator> data_;
  int64_t bucket_elements_;
  at::ScalarType wire_;
  std::map<std::string, std::shared_ptr<comm::MpiCommunicator>> tied_comms_;
  std::vector<at::Tensor> norm_parameters_;
  std::vector<at::Tensor> buckets_;  // allocated once, reused every step
};

}  // namespace pipetrain::engine
