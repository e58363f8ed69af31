#include "pipetrain/engine/stage_link.h"

#include <stdexcept>
#include <utility>

#include "pipetrain/comm/partitioned_transfer.h"
#include "pipetrain/device/transport.h"

namespace pipetrain::engine {
namespace {

int tag_of(Channel channel) {
  return 2 * channel.chunk + (channel.flow == Flow::kActivation ? 1 : 2);
}

int64_t byte_size(const comm::TensorList& tensors) {
  int64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.numel() * t.element_size();
  return bytes;
}

}  // namespace

StageLink::StageLink(std::shared_ptr<const topology::Grid> grid, bool partitioned,
                     at::Device device, bool nccl_allowed, bool receive_ahead)
    : grid_(std::move(grid)),
      partitioned_(partitioned),
      device_(device),
      transport_(grid_->pipe_comm(), grid_->pipe_comm(), device) {
  if (nccl_allowed) {
    for (const auto& [stage, link] : device::neighbour_links(grid_->pipe_comm(), device)) {
      transports_[stage] = link.transport;
      if (link.comm) transport_.route_payloads(stage, link.comm, link.rank_there);
    }
  }
  // Only CPU tensors, which always travel over MPI: NCCL payloads are matched by order on
  // one stream and must not be posted from the helper thread, nor host-staged copies to a
  // GPU made on it (not yet tried on a GPU); without the thread, a receive posted ahead
  // would not move.
  receive_ahead_ = receive_ahead && device_.is_cpu() && in_flight_.threaded();
}

std::string StageLink::transports() const {
  std::string each;
  bool alike = true;
  for (const auto& [stage, transport] : transports_) {
    alike = alike && transport == transports_.begin()->second;
    each += std::string(each.empty() ? "" : ", ") + std::string(comm::transport_name(transport)) +
            " to stage " + std::to_string(stage);
  }
  if (transports_.empty()) return "mpi";
  return alike ? std::string(comm::transport_name(transports_.begin()->second)) : each;
}

bool StageLink::partitioned() const {
  return partitioned_ && grid_->model_parallel_size() > 1;
}

void StageLink::send(const comm::TensorList& tensors, int stage, Channel channel) {
  if (!partitioned()) {
    bytes_ += byte_size(tensors);
    return post(tensors, stage, channel);
  }
  const comm::PartitionedTensors partitioned =
      comm::partition(tensors, grid_->model_parallel_id(), grid_->model_parallel_size());
  bytes_ += byte_size(partitioned.shares);
  comm::TensorList wire{partitioned.layout.to(device_)};  // payloads travel on the device
  wire.insert(wire.end(), partitioned.shares.begin(), partitioned.shares.end());
  post(wire, stage, channel);
}

void StageLink::post(const comm::TensorList& wire, int stage, Channel channel) {
  comm::PendingSend pending = transport_.send(wire, stage, tag_of(channel));
  if (completion_ == SendCompletion::kBlocking) return pending.wait();
  in_flight_.add(std::move(pending));
}

comm::TensorList StageLink::recv(int stage, Channel channel, const comm::TensorList& reuse) {
  if (!partitioned()) {
    comm::TensorList tensors = receive(stage, tag_of(channel), reuse);
    bytes_ += byte_size(tensors);
    return tensors;
  }
  comm::TensorList wire = receive(stage, tag_of(channel), {});
  if (wire.empty()) throw std::runtime_error("a partitioned transfer arrived without its layout");
  const comm::PartitionedTensors partitioned{wire.front().cpu(),  // read on the host
                                             {wire.begin() + 1, wire.end()}};
  bytes_ += byte_size(partitioned.shares);
  return comm::assemble(partitioned, *grid_->model_comm());
}

comm::TensorList StageLink::receive(int stage, int tag, const comm::TensorList& reuse) {
  const auto found = ahead_.find({stage, tag});
  if (found == ahead_.end() || !found->second.posted) return transport_.recv(stage, tag, reuse);
  Ahead& ahead = found->second;
  in_flight_.withdraw(ahead.posted.get());
  comm::TensorList tensors = std::exchange(ahead.posted, nullptr)->wait();
  if (ahead.still_expected > 0) {  // posted only now: transfers on a tag arrive in order
    --ahead.still_expected;
    ahead.posted = transport_.post_recv(stage, tag);
    in_flight_.add(ahead.posted.get());
  }
  return tensors;
}

void StageLink::expect_receives(const std::vector<Receive>& receives) {
  cancel_receives_ahead();
  if (!receive_ahead_) return;
  for (const Receive& receive : receives)
    ++ahead_[{receive.stage, tag_of(receive.channel)}].still_expected;
  for (auto& [key, ahead] : ahead_) {
    --ahead.still_expected;
    ahead.posted = transport_.post_recv(key.first, key.second);
    in_flight_.add(ahead.posted.get());
  }
}

void StageLink::cancel_receives_ahead() {
  for (auto& [key, ahead] : ahead_) {
    if (ahead.posted) in_flight_.withdraw(ahead.posted.get());  // its MPI receives cancel
  }
  ahead_.clear();
}

}  // namespace pipetrain::engine
