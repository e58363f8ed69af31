#include "pipetrain/engine/communicators.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "pipetrain/device/placement.h"

namespace pipetrain::engine {

Communicators::Communicators(std::shared_ptr<topology::Grid> grid, device::DeviceKind device,
                             comm::Seconds timeout)
    : grid_(std::move(grid)), device_(at::kCPU) {
  if (timeout.count() > 0) grid_->set_timeout(timeout);
  device_ = device::place_rank(device, *grid_->world_comm());
  model_ = device::communicator_for(grid_->model_comm(), device_);
  data_ = device::communicator_for(grid_->data_comm(), device_);
}

void Communicators::expect(bool in_order, const char* step) {
  if (!in_order) {
    throw std::logic_error(std::string("Communicators: ") + step +
                           " out of order (see communicators.h)");
  }
}

void Communicators::connect_tied(const module::PipelineModule& module) {
  expect(made_ == Made::kGroups, "connect_tied");
  made_ = Made::kTied;
  std::map<std::string, bool> seen;
  for (const auto& spec : module.specs()) {
    if (!spec.tied() || seen[spec.tie_key]) continue;
    seen[spec.tie_key] = true;
    const auto owners = module.tie_owner_stages(spec.tie_key);
    if (owners.size() < 2) continue;
    const bool owner = std::find(owners.begin(), owners.end(), grid_->stage_id()) != owners.end();
    const int group =
        1 + grid_->data_parallel_id() * grid_->model_parallel_size() + grid_->model_parallel_id();
    auto split = grid_->world_comm()->split(owner ? group : 0, grid_->global_rank());
    if (!owner) continue;
    split->set_timeout(grid_->pipe_comm()->timeout());
    tied_[spec.tie_key] = device::communicator_for(split, device_);
  }
}

void Communicators::connect_pipe(bool nccl_allowed) {
  expect(made_ != Made::kPipe, "connect_pipe");
  made_ = Made::kPipe;
  if (nccl_allowed) {
    pipe_links_ = device::neighbour_links(grid_->pipe_comm(), device_);
    return;
  }
  const int stage = grid_->stage_id();
  for (const int neighbour : {stage - 1, stage + 1}) {
    if (neighbour >= 0 && neighbour < grid_->pipe_parallel_size())
      pipe_links_[neighbour] = {.transport = comm::Transport::kMpi, .comm = nullptr};
  }
}

std::string Communicators::pipe_transports() const {
  std::string each;
  bool alike = true;
  for (const auto& [stage, link] : pipe_links_) {
    alike = alike && link.transport == pipe_links_.begin()->second.transport;
    each += std::string(each.empty() ? "" : ", ") +
            std::string(comm::transport_name(link.transport)) + " to stage " +
            std::to_string(stage);
  }
  if (pipe_links_.empty()) return "mpi";
  return alike ? std::string(comm::transport_name(pipe_links_.begin()->second.transport)) : each;
}

std::string Communicators::describe() const {
  std::string text = "pipe " + pipe_transports() + ", data-parallel " +
                     std::string(comm::transport_name(data_transport()));
  if (!tied_.empty()) {
    text +=
        ", tied " + std::string(comm::transport_name(device::transport_of(*tied_.begin()->second)));
  }
  if (model_->size() > 1)
    text += ", tensor-parallel " + std::string(comm::transport_name(device::transport_of(*model_)));
  return text;
}

}  // namespace pipetrain::engine
