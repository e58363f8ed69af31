#include "schedule/pair_order.h"

#include <exception>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace pipetrain::schedule {
namespace {

PairTransfer transfer_of(const PipeShape& shape, int stage, const Instruction& in, int step,
                         int index) {
  const bool gradient = in.kind == OpKind::kSendGrad || in.kind == OpKind::kRecvGrad;
  Peer receiver{stage, in.chunk};
  if (is_send(in.kind)) receiver = transfer_peer(shape, stage, in);
  return {.channel =
              gradient ? Channel::gradients(receiver.chunk) : Channel::activations(receiver.chunk),
          .receiving_virtual_stage = shape.virtual_stage(receiver.stage, receiver.chunk),
          .micro_batch = in.micro_batch,
          .step = step,
          .index = index,
          .instruction = in};
}

std::string describe(const PairTransfer& t) {
  return std::string(t.channel.gradient() ? "the gradient" : "the activation") +
         " of micro-batch " + std::to_string(t.micro_batch) + " for virtual stage " +
         std::to_string(t.receiving_virtual_stage);
}

}  // namespace

bool PairTransfer::matches(const PairTransfer& other) const {
  return channel == other.channel && receiving_virtual_stage == other.receiving_virtual_stage &&
         micro_batch == other.micro_batch;
}

std::map<std::pair<int, int>, PairTransfers> transfers_by_pair(const PipelinePlan& plan) {
  std::map<std::pair<int, int>, PairTransfers> pairs;
  for (int stage = 0; stage < static_cast<int>(plan.stage_steps.size()); ++stage) {
    const auto& steps = plan.stage_steps[stage];
    for (int step = 0; step < static_cast<int>(steps.size()); ++step) {
      for (int index = 0; index < static_cast<int>(steps[step].size()); ++index) {
        const Instruction& in = steps[step][index];
        if (!is_send(in.kind) && !is_recv(in.kind)) continue;
        const int peer = transfer_peer(plan.shape, stage, in).stage;
        if (peer == stage) continue;  // a local hand-over: no message to match
        const PairTransfer transfer = transfer_of(plan.shape, stage, in, step, index);
        if (is_send(in.kind)) {
          pairs[{stage, peer}].sent.push_back(transfer);
        } else {
          pairs[{peer, stage}].received.push_back(transfer);
        }
      }
    }
  }
  return pairs;
}

std::optional<Violation> first_order_mismatch(const std::pair<int, int>& pair,
                                              const std::vector<PairTransfer>& sends,
                                              const std::vector<PairTransfer>& receives) {
  for (std::size_t k = 0; k < receives.size(); ++k) {
    const PairTransfer& r = receives[k];
    if (k < sends.size() && sends[k].matches(r)) continue;
    const std::string got = k < sends.size() ? describe(sends[k]) : "nothing";
    return Violation{pair.second, r.step, r.index, r.instruction,
                     "matched by order alone, receive " + std::to_string(k) + " from stage " +
                         std::to_string(pair.first) + " waits for " + describe(r) +
                         " but would get " + got};
  }
  if (sends.size() > receives.size()) {
    const PairTransfer& s = sends[receives.size()];
    return Violation{pair.first, s.step, s.index, s.instruction,
                     "matched by order alone, send " + std::to_string(receives.size()) +
                         " to stage " + std::to_string(pair.second) + " has no receive"};
  }
  return std::nullopt;
}

std::optional<Violation> first_order_mismatch(const PipelinePlan& plan) {
  for (const auto& [pair, transfers] : transfers_by_pair(plan)) {
    if (auto mismatch = first_order_mismatch(pair, transfers.sent, transfers.received))
      return mismatch;
  }
  return std::nullopt;
}

bool runs_matched_by_order(const PipelinePlan& plan) {
  return !first_order_mismatch(plan) && !validate(plan, SendMode::kSynchronous);
}

std::vector<TransferGroup> transfer_groups(const std::vector<Step>& steps) {
  std::vector<TransferGroup> groups;
  for (int step = 0; step < static_cast<int>(steps.size()); ++step) {
    const Step& instructions = steps[step];
    for (int i = 0; i < static_cast<int>(instructions.size());) {
      const auto transfer = [&](int k) {
        return is_send(instructions[k].kind) || is_recv(instructions[k].kind);
      };
      int end = i + 1;
      if (transfer(i)) {
        while (end < static_cast<int>(instructions.size()) && transfer(end)) ++end;
      }
      groups.push_back({step, i, end - i});
      i = end;
    }
  }
  return groups;
}

namespace {

// Where each transfer of a plan sits: stage, group, and the other end's stage and group.
struct GroupedPlan {
  std::vector<std::vector<TransferGroup>> groups;  // per stage
  // Per stage, per group: the (peer stage, peer group) of each of its transfers.
  std::vector<std::vector<std::vector<std::pair<int, int>>>> ends;
};

GroupedPlan grouped(const PipelinePlan& plan) {
  const PipeShape& shape = plan.shape;
  const int stages = static_cast<int>(plan.stage_steps.size());
  GroupedPlan g;
  g.groups.resize(stages);
  g.ends.resize(stages);
  // By (from, to): the group of each send and each receive, in order.
  std::map<std::pair<int, int>, std::vector<int>> send_groups, recv_groups;
  struct Slot {
    int stage, group, peer;
    bool send;
    int order;
  };
  std::vector<Slot> slots;
  for (int s = 0; s < stages; ++s) {
    g.groups[s] = transfer_groups(plan.stage_steps[s]);
    g.ends[s].resize(g.groups[s].size());
    for (int k = 0; k < static_cast<int>(g.groups[s].size()); ++k) {
      const TransferGroup& group = g.groups[s][k];
      for (int i = group.first; i < group.first + group.count; ++i) {
        const Instruction& in = plan.stage_steps[s][group.step][i];
        if (!is_send(in.kind) && !is_recv(in.kind)) continue;
        const int peer = transfer_peer(shape, s, in).stage;
        if (peer == s) continue;  // a local hand-over
        auto& list = is_send(in.kind) ? send_groups[{s, peer}] : recv_groups[{peer, s}];
        slots.push_back({s, k, peer, is_send(in.kind), static_cast<int>(list.size())});
        list.push_back(k);
      }
    }
  }
  for (const Slot& slot : slots) {
    const auto& other =
        slot.send ? recv_groups[{slot.stage, slot.peer}] : send_groups[{slot.peer, slot.stage}];
    const int there = slot.order < static_cast<int>(other.size()) ? other[slot.order] : -1;
    g.ends[slot.stage][slot.group].push_back({slot.peer, there});
  }
  return g;
}

}  // namespace

std::optional<Violation> first_grouped_deadlock(const PipelinePlan& plan) {
  const GroupedPlan g = grouped(plan);
  const int stages = static_cast<int>(g.groups.size());
  const auto site = [&](int s, int k, const std::string& reason) {
    const TransferGroup& group = g.groups[s][k];
    return Violation{s, group.step, group.first, plan.stage_steps[s][group.step][group.first],
                     reason};
  };
  for (int s = 0; s < stages; ++s) {
    for (int k = 0; k < static_cast<int>(g.groups[s].size()); ++k) {
      for (const auto& [peer, there] : g.ends[s][k]) {
        if (there < 0)
          return site(
              s, k,
              "a grouped transfer to or from stage " + std::to_string(peer) + " has no other end");
      }
    }
  }
  std::vector<int> at(stages, 0);  // each stage's current group
  while (true) {
    bool progressed = false, finished = true;
    for (int s = 0; s < stages; ++s) {
      while (at[s] < static_cast<int>(g.groups[s].size())) {
        bool ready = true;
        for (const auto& [peer, there] : g.ends[s][at[s]]) ready = ready && at[peer] >= there;
        if (!ready) break;
        ++at[s];
        progressed = true;
      }
      finished = finished && at[s] == static_cast<int>(g.groups[s].size());
    }
    if (finished) return std::nullopt;
    if (!progressed) {
      for (int s = 0; s < stages; ++s) {
        if (at[s] < static_cast<int>(g.groups[s].size()))
          return site(s, at[s],
                      "deadlock: grouped transfers matched by order alone wait for "
                      "each other on every stage");
      }
    }
  }
}

bool pipe_fits_nccl(Kind kind, const PipeShape& shape) {
  if (kind == Kind::kFile) return false;
  try {
    PipeShape one = shape;
    one.micro_batches = 1;
    return pipe_lanes({plan_pipeline(kind, shape), plan_pipeline(Kind::kInference, shape),
                       plan_pipeline(Kind::kInference, one)})
        .has_value();
  } catch (const std::exception&) {
    return false;  // a shape the schedule cannot run has no pipe at all
  }
}

}  // namespace pipetrain::schedule
