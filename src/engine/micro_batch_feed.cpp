#include "engine/micro_batch_feed.h"

#include <ATen/ATen.h>

#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include "pipetrain/comm/tensor_transport.h"

namespace pipetrain::engine {

namespace {

// A host tensor on `device`: through pinned memory and a copy the host need not wait for.
at::Tensor placed(const at::Tensor& tensor, at::Device device) {
  if (tensor.device() == device) return tensor;
  const at::Tensor host =
      tensor.device().is_cpu() && device.is_cuda() ? tensor.pin_memory() : tensor;
  return host.to(device, /*non_blocking=*/true);
}

}  // namespace

MicroBatchFeed::MicroBatchFeed(std::shared_ptr<const topology::Grid> grid, at::ScalarType dtype,
                               at::Device device, Ends ends)
    : grid_(std::move(grid)), dtype_(dtype), device_(device), ends_(ends) {}

MicroBatch MicroBatchFeed::next(MicroBatchSource* source, int loaded, int64_t step) {
  // One rank of the group that computes these samples (context x model) reads them.
  auto& group = *grid_->sample_comm();
  std::optional<comm::TensorList> inputs, labels;
  std::exception_ptr failure;
  if (group.rank() == 0) {
    try {
      MicroBatch batch = read(source, loaded, step);
      inputs = std::move(batch.inputs);
      labels = std::move(batch.labels);
    } catch (const std::exception&) {
      if (group.size() == 1) throw;
      failure = std::current_exception();
    }
  }
  if (group.size() > 1) {
    if (ends_.first) inputs = comm::broadcast_tensors(group, inputs, 0);
    if (ends_.last) labels = comm::broadcast_tensors(group, labels, 0);
    if (failure) std::rethrow_exception(failure);
    if (!inputs && !labels) {
      throw std::runtime_error("the group's reading rank (rank " +
                               std::to_string(group.global_rank(0)) +
                               ") had no micro-batch to share");
    }
  }
  MicroBatch batch;
  if (ends_.first) {
    batch.inputs = std::move(*inputs);
    for (auto& t : batch.inputs) {
      t = placed(t, device_);
      if (at::isFloatingType(t.scalar_type()) && t.scalar_type() != dtype_) t = t.to(dtype_);
    }
  }
  if (ends_.last) {
    batch.labels = std::move(*labels);
    for (auto& t : batch.labels) t = placed(t, device_);
  }
  return batch;
}

MicroBatch MicroBatchFeed::read(MicroBatchSource* source, int loaded, int64_t step) {
  if (!source)
    throw std::logic_error("stage " + std::to_string(grid_->stage_id()) +
                           " needs data but got none");
  try {
    return source->next();
  } catch (const DataExhausted&) {
    throw std::runtime_error("the data ran out at micro-batch " + std::to_string(loaded) +
                             " of step " + std::to_string(step) +
                             " (wrap the loader in a RepeatingLoader to train for longer)");
  }
}

}  // namespace pipetrain::engine
