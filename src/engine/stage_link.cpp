#include "engine/stage_link.h"

#include <stdexcept>
#include <utility>

#include "comm/partitioned_transfer.h"

namespace pipetrain::engine {
namespace {

int64_t byte_size(const comm::TensorList& tensors) {
  int64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.numel() * t.element_size();
  return bytes;
}

}  // namespace

StageLink::StageLink(const groups::Communicators& comms, bool partitioned)
    : grid_(comms.grid()),
      tensor_(comms.tensor_group().comm),
      partitioned_(partitioned),
      device_(comms.device()),
      transport_(grid_->pipe_comm(), device_) {
  for (const auto& [stage, link] : comms.pipe_links()) {
    for (const auto& [tag, way] : link.to) transport_.route_sends(stage, tag, way, link.rank_there);
    for (const auto& [tag, way] : link.from)
      transport_.route_receives(stage, tag, way, link.rank_there);
  }
}

bool StageLink::partitioned() const {
  return partitioned_ && grid_->tensor_parallel_size() > 1;
}

void StageLink::send(const comm::TensorList& tensors, int stage, Channel channel) {
  const comm::TensorList& out = outgoing_ ? outgoing_(tensors) : tensors;
  if (stage != grid_->stage_id()) return transmit(out, stage, channel);
  comm::TensorList handed;
  for (const auto& t : out) {
    const bool grad = t.requires_grad() && at::isFloatingType(t.scalar_type());
    handed.push_back(t.detach().requires_grad_(grad));
  }
  local_[channel.tag()].push_back(std::move(handed));
}

void StageLink::transmit(const comm::TensorList& tensors, int stage, Channel channel) {
  if (!partitioned()) {
    bytes_ += byte_size(tensors);
    return post(tensors, stage, channel);
  }
  const comm::PartitionedTensors partitioned =
      comm::partition(tensors, grid_->tensor_parallel_id(), grid_->tensor_parallel_size());
  bytes_ += byte_size(partitioned.shares);
  // The layout stays in host memory (it travels over MPI with the header); the shares on
  // the device.
  comm::TensorList wire{partitioned.layout};
  wire.insert(wire.end(), partitioned.shares.begin(), partitioned.shares.end());
  post(wire, stage, channel);
}

void StageLink::post(const comm::TensorList& wire, int stage, Channel channel) {
  comm::PendingSend pending = transport_.send(wire, stage, channel.tag());
  if (completion_ == SendCompletion::kBlocking) return pending.wait();
  in_flight_.add(std::move(pending));
}

comm::PendingSend StageLink::feed_back(const comm::TensorList& tensors, int stage) {
  return transport_.send(tensors, stage, Channel::feedback().tag());
}

comm::TensorList StageLink::fed_back(int stage) {
  return transport_.recv(stage, Channel::feedback().tag());
}

comm::TensorList StageLink::recv(int stage, Channel channel, const comm::TensorList& reuse) {
  if (stage == grid_->stage_id()) {
    auto& queue = local_[channel.tag()];
    if (queue.empty()) throw std::logic_error("a local hand-over is received before it was sent");
    comm::TensorList tensors = std::move(queue.front());
    queue.pop_front();
    return tensors;
  }
  if (!partitioned()) {
    comm::TensorList tensors = transport_.recv(stage, channel.tag(), reuse);
    bytes_ += byte_size(tensors);
    return tensors;
  }
  comm::TensorList wire = transport_.recv(stage, channel.tag(), {});
  if (wire.empty()) throw std::runtime_error("a partitioned transfer arrived without its layout");
  const comm::PartitionedTensors partitioned{wire.front(), {wire.begin() + 1, wire.end()}};
  bytes_ += byte_size(partitioned.shares);
  return comm::assemble(partitioned, *tensor_, *grid_->tensor_comm());
}

}  // namespace pipetrain::engine
