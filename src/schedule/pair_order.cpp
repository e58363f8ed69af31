#include "pipetrain/schedule/pair_order.h"

#include <exception>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace pipetrain::schedule {
namespace {

// One transfer between two stages, as both ends name it.
struct Transfer {
  bool gradient = false;
  int receiving_virtual_stage = 0;
  int micro_batch = -1;

  bool operator==(const Transfer&) const = default;
};

struct Posted {
  Transfer transfer;
  int step = 0;
  int index = 0;
  Instruction instruction;
};

Transfer transfer_of(const PipeShape& shape, int stage, const Instruction& in) {
  const bool gradient = in.kind == OpKind::kSendGrad || in.kind == OpKind::kRecvGrad;
  const int here = shape.virtual_stage(stage, in.chunk);
  if (is_recv(in.kind)) return {gradient, here, in.micro_batch};
  const Peer peer = transfer_peer(shape, stage, in);
  return {gradient, shape.virtual_stage(peer.stage, peer.chunk), in.micro_batch};
}

std::string describe(const Transfer& t) {
  return std::string(t.gradient ? "the gradient" : "the activation") + " of micro-batch " +
         std::to_string(t.micro_batch) + " for virtual stage " +
         std::to_string(t.receiving_virtual_stage);
}

}  // namespace

std::optional<Violation> first_order_mismatch(const PipelinePlan& plan) {
  const PipeShape& shape = plan.shape;
  // By (from, to): what `from` sends, and what `to` receives, each in its own order.
  std::map<std::pair<int, int>, std::vector<Posted>> sent, received;
  for (int stage = 0; stage < static_cast<int>(plan.stage_steps.size()); ++stage) {
    const auto& steps = plan.stage_steps[stage];
    for (int step = 0; step < static_cast<int>(steps.size()); ++step) {
      for (int index = 0; index < static_cast<int>(steps[step].size()); ++index) {
        const Instruction& in = steps[step][index];
        if (!is_send(in.kind) && !is_recv(in.kind)) continue;
        const int peer = transfer_peer(shape, stage, in).stage;
        if (peer == stage) continue;  // a local hand-over: no message to match
        const Posted posted{transfer_of(shape, stage, in), step, index, in};
        if (is_send(in.kind)) {
          sent[{stage, peer}].push_back(posted);
        } else {
          received[{peer, stage}].push_back(posted);
        }
      }
    }
  }
  for (const auto& [pair, receives] : received) {
    const auto& sends = sent[pair];
    for (std::size_t k = 0; k < receives.size(); ++k) {
      const Posted& r = receives[k];
      if (k < sends.size() && sends[k].transfer == r.transfer) continue;
      const std::string got = k < sends.size() ? describe(sends[k].transfer) : "nothing";
      return Violation{pair.second, r.step, r.index, r.instruction,
                       "matched by order alone, receive " + std::to_string(k) + " from stage " +
                           std::to_string(pair.first) + " waits for " + describe(r.transfer) +
                           " but would get " + got};
    }
  }
  for (const auto& [pair, sends] : sent) {
    const std::size_t taken = received.count(pair) ? received.at(pair).size() : 0;
    if (sends.size() > taken) {
      const Posted& s = sends[taken];
      return Violation{pair.first, s.step, s.index, s.instruction,
                       "matched by order alone, send " + std::to_string(taken) + " to stage " +
                           std::to_string(pair.second) + " has no receive"};
    }
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

bool neighbours_only(const PipeShape& shape) {
  return shape.chunks == 1 || shape.stages == 2 ||
         (shape.chunks == 2 && shape.placement == Placement::kV);
}

bool pipe_fits_nccl(Kind kind, const PipeShape& shape) {
  if (kind == Kind::kFile || !neighbours_only(shape)) return false;
  try {
    PipeShape one = shape;
    one.micro_batches = 1;
    return !first_order_mismatch(plan_pipeline(kind, shape)) &&
           !first_order_mismatch(plan_pipeline(Kind::kInference, shape)) &&
           !first_order_mismatch(plan_pipeline(Kind::kInference, one));
  } catch (const std::exception&) {
    return false;  // a shape the schedule cannot run has no pipe at all
  }
}

}  // namespace pipetrain::schedule
