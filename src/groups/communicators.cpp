#include "pipetrain/groups/communicators.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "device/emulated_hosts.h"
#include "device/placement.h"

namespace pipetrain::groups {
namespace {

// "nccl", "mpi", or "nccl (emulated hosts)" where NCCL runs between emulated hosts.
std::string transport_text(comm::Transport transport) {
  std::string text(comm::transport_name(transport));
  if (transport == comm::Transport::kNccl && device::emulated_hosts()) text += " (emulated hosts)";
  return text;
}

}  // namespace

Communicators::Communicators(std::shared_ptr<topology::Grid> grid, device::DeviceKind device,
                             comm::Seconds timeout, CommunicatorTesting testing)
    : grid_(std::move(grid)), testing_(std::move(testing)), device_(at::kCPU) {
  if (timeout.count() > 0) grid_->set_timeout(timeout);
  device_ = device::place_rank(device, *grid_->world_comm());
  tensor_ = wrapped(device::communicator_for(grid_->tensor_comm(), device_), TensorGroup::kModel);
  data_ = wrapped(device::communicator_for(grid_->replica_comm(), device_), TensorGroup::kData);
  if (grid_->expert_parallel_size() > 1) {
    experts_ =
        wrapped(device::communicator_for(grid_->expert_comm(), device_), TensorGroup::kExperts);
  }
  if (grid_->context_parallel_size() > 1) {
    context_ =
        wrapped(device::communicator_for(grid_->context_comm(), device_), TensorGroup::kContext);
  }
}

std::shared_ptr<comm::Communicator> Communicators::wrapped(std::shared_ptr<comm::Communicator> made,
                                                           TensorGroup group) const {
  return testing_.wrap ? testing_.wrap(std::move(made), group) : made;
}

Communicators::~Communicators() {
  release_pipe_lanes();
  tied_.clear();
  context_.reset();
  experts_.reset();
  data_.reset();
  tensor_.reset();
}

void Communicators::release_pipe_lanes() {
  // Both ends of a pair release its lanes in one order, (from, to) then tag, and the pairs
  // go by their lower stage, then their higher: ascending peers on every rank.
  const int stage = grid_->stage_id();
  for (auto& [peer, link] : pipe_links_) {
    auto& first = peer > stage ? link.to : link.from;  // the lanes from the lower stage
    auto& second = peer > stage ? link.from : link.to;
    for (auto* lanes : {&first, &second}) {
      for (auto& [tag, lane] : *lanes) lane.reset();
      lanes->clear();
    }
  }
  pipe_links_.clear();
}

expert_parallel::Group Communicators::experts_group() const {
  if (!experts_) return {};
  return {experts_, grid_->expert_comm()};
}

bool Communicators::pipe_uses_nccl() const {
  return std::any_of(pipe_links_.begin(), pipe_links_.end(), [](const auto& entry) {
    return entry.second.transport == comm::Transport::kNccl;
  });
}

bool Communicators::uses_nccl() const {
  bool nccl = data_transport() == comm::Transport::kNccl ||
              tensor_->transport() == comm::Transport::kNccl ||
              (experts_ && experts_->transport() == comm::Transport::kNccl) ||
              (context_ && context_->transport() == comm::Transport::kNccl);
  for (const auto& [key, group] : tied_)
    nccl = nccl || group->transport() == comm::Transport::kNccl;
  return nccl || pipe_uses_nccl();
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
        1 + grid_->replica_id() * grid_->tensor_parallel_size() + grid_->tensor_parallel_id();
    auto split = grid_->world_comm()->split(owner ? group : 0, grid_->global_rank());
    if (!owner) continue;
    split->set_timeout(grid_->pipe_comm()->timeout());
    tied_[spec.tie_key] = wrapped(device::communicator_for(split, device_), TensorGroup::kTied);
  }
}

void Communicators::connect_pipe(const std::optional<std::vector<schedule::PipeLane>>& lanes) {
  expect(made_ != Made::kPipe, "connect_pipe");
  made_ = Made::kPipe;
  if (lanes) {
    pipe_links_ = device::pipe_links(grid_->pipe_comm(), device_, *lanes, testing_.pair_links);
    for (auto& [stage, link] : pipe_links_) {
      for (auto* way : {&link.to, &link.from})
        for (auto& [tag, made] : *way) made = wrapped(made, TensorGroup::kPipePair);
    }
    return;
  }
  const int stage = grid_->stage_id();
  for (const int neighbour : {stage - 1, stage + 1}) {
    if (neighbour >= 0 && neighbour < grid_->pipe_parallel_size())
      pipe_links_[neighbour] = {.transport = comm::Transport::kMpi};
  }
}

std::string Communicators::pipe_transports() const {
  std::string each;
  bool alike = true;
  for (const auto& [stage, link] : pipe_links_) {
    alike = alike && link.transport == pipe_links_.begin()->second.transport;
    each += std::string(each.empty() ? "" : ", ") + transport_text(link.transport) + " to stage " +
            std::to_string(stage);
  }
  if (pipe_links_.empty()) return "mpi";
  return alike ? transport_text(pipe_links_.begin()->second.transport) : each;
}

std::string Communicators::describe() const {
  std::string text =
      "pipe " + pipe_transports() + ", data-parallel " + transport_text(data_transport());
  if (!tied_.empty()) text += ", tied " + transport_text(tied_.begin()->second->transport());
  if (tensor_->size() > 1) text += ", tensor-parallel " + transport_text(tensor_->transport());
  if (experts_) text += ", expert-parallel " + transport_text(experts_->transport());
  if (context_) text += ", context-parallel " + transport_text(context_->transport());
  return text;
}

}  // namespace pipetrain::groups
