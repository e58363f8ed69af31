#include <algorithm>
#include <stdexcept>
#include <string>

#include "pipetrain/schedule/compute_order.h"
#include "schedule/render.h"

namespace pipetrain::schedule {
namespace {

constexpr int kNotDone = -1;

// Round in which each (pass kind, virtual stage, micro-batch) completed.
class Completion {
 public:
  explicit Completion(const PipeShape& shape)
      : micro_batches_(shape.micro_batches),
        forward_(size(shape), kNotDone),
        backward_(size(shape), kNotDone) {}

  // Done in a round before `round`.
  bool forward_before(int vs, int mb, int round) const { return before(forward_, vs, mb, round); }
  bool backward_before(int vs, int mb, int round) const { return before(backward_, vs, mb, round); }
  void set_forward(int vs, int mb, int round) { forward_[index(vs, mb)] = round; }
  void set_backward(int vs, int mb, int round) { backward_[index(vs, mb)] = round; }

 private:
  static std::size_t size(const PipeShape& shape) {
    return static_cast<std::size_t>(shape.virtual_stages()) * shape.micro_batches;
  }
  std::size_t index(int vs, int mb) const {
    return static_cast<std::size_t>(vs) * micro_batches_ + mb;
  }
  bool before(const std::vector<int>& done, int vs, int mb, int round) const {
    const int r = done[index(vs, mb)];
    return r != kNotDone && r < round;
  }

  int micro_batches_;
  std::vector<int> forward_;
  std::vector<int> backward_;  // BackwardPass or BackwardInput
};

// Lowest-numbered free buffer first, so buffer counts stay minimal.
class BufferPool {
 public:
  int take() {
    const auto free = std::find(in_use_.begin(), in_use_.end(), false);
    const int id = static_cast<int>(free - in_use_.begin());
    if (free == in_use_.end()) {
      in_use_.push_back(true);
    } else {
      *free = true;
    }
    return id;
  }
  void release(int id) { in_use_[id] = false; }
  int high_water() const { return std::max<int>(1, static_cast<int>(in_use_.size())); }

 private:
  std::vector<bool> in_use_;
};

bool ready(const PipeShape& shape, int stage, const ComputeOp& op, const Completion& done,
           int round) {
  const int vs = shape.virtual_stage(stage, op.chunk);
  switch (op.kind) {
    case OpKind::kForwardPass:
      return vs == 0 || done.forward_before(vs - 1, op.micro_batch, round);
    case OpKind::kBackwardPass:
    case OpKind::kBackwardInput:
      return done.forward_before(vs, op.micro_batch, round) &&
             (vs == shape.virtual_stages() - 1 ||
              done.backward_before(vs + 1, op.micro_batch, round));
    case OpKind::kBackwardWeight:
      return done.backward_before(vs, op.micro_batch, round);
    default:
      throw std::logic_error("compute order holds a non-compute instruction");
  }
}

// The pass `op` on `stage` waits for (one not done before `round`), as (rank, its text).
std::pair<int, std::string> awaited(const PipeShape& shape, int stage, const ComputeOp& op,
                                    const Completion& done, int round) {
  const int vs = shape.virtual_stage(stage, op.chunk);
  auto on = [&](int other_vs, OpKind kind) {
    const ComputeOp other{kind, op.micro_batch, shape.chunk_of(other_vs)};
    return std::pair{shape.stage_of(other_vs), action_text(shape, shape.stage_of(other_vs), other)};
  };
  switch (op.kind) {
    case OpKind::kForwardPass:
      return on(vs - 1, OpKind::kForwardPass);
    case OpKind::kBackwardPass:
    case OpKind::kBackwardInput:
      if (!done.forward_before(vs, op.micro_batch, round)) return on(vs, OpKind::kForwardPass);
      return on(vs + 1, OpKind::kBackwardPass);  // or its input gradient
    default:
      return on(vs, OpKind::kBackwardInput);
  }
}

// Who waits for whom when no rank can move: a cycle of ranks if there is one.
std::string deadlock_text(const PipeShape& shape, const std::vector<ComputeOrder>& orders,
                          const std::vector<std::size_t>& next, const Completion& done, int round) {
  const int p = shape.stages;
  std::vector<int> waits_on(p, -1);
  std::vector<std::string> text(p);
  for (int s = 0; s < p; ++s) {
    if (next[s] >= orders[s].size()) continue;
    const ComputeOp& op = orders[s][next[s]];
    const auto [rank, what] = awaited(shape, s, op, done, round);
    waits_on[s] = rank;
    text[s] = "rank " + std::to_string(s) + " waits at " + action_text(shape, s, op) + " for " +
              what + " (rank " + std::to_string(rank) + ")";
  }
  // Follow the waits from the first waiting rank until a rank repeats: that is the cycle.
  int s = static_cast<int>(
      std::find_if(waits_on.begin(), waits_on.end(), [](int r) { return r >= 0; }) -
      waits_on.begin());
  std::vector<int> seen;
  while (s >= 0 && s < p && std::find(seen.begin(), seen.end(), s) == seen.end()) {
    seen.push_back(s);
    s = waits_on[s];
  }
  std::string cycle;
  if (s >= 0 && s < p) {
    for (auto it = std::find(seen.begin(), seen.end(), s); it != seen.end(); ++it)
      cycle += (cycle.empty() ? "" : ", ") + text[*it];
  }
  if (cycle.empty()) {
    for (int r = 0; r < p; ++r)
      if (!text[r].empty()) cycle += (cycle.empty() ? "" : ", ") + text[r];
  }
  return "deadlock after round " + std::to_string(round) + ": " + cycle;
}

// The instructions of one pass: receive its input, load data, compute, send the result.
void emit(const PipeShape& shape, int stage, const ComputeOp& op, int buffer, Step& step) {
  const int vs = shape.virtual_stage(stage, op.chunk);
  const bool first = vs == 0;
  const bool last = vs == shape.virtual_stages() - 1;
  auto add = [&](OpKind kind) { step.push_back({kind, buffer, op.chunk, op.micro_batch}); };
  switch (op.kind) {
    case OpKind::kForwardPass:
      if (!first) add(OpKind::kRecvActivation);
      if (first || last) add(OpKind::kLoadMicroBatch);
      add(OpKind::kForwardPass);
      if (!last) add(OpKind::kSendActivation);
      break;
    case OpKind::kBackwardPass:
    case OpKind::kBackwardInput:
      if (!last) add(OpKind::kRecvGrad);
      add(op.kind);
      if (!first) add(OpKind::kSendGrad);
      break;
    default:
      add(op.kind);
  }
}

}  // namespace

std::string action_text(const PipeShape& shape, int rank, const ComputeOp& op) {
  return std::to_string(shape.virtual_stage(rank, op.chunk)) + compute_letter(op.kind) +
         std::to_string(op.micro_batch);
}

LockstepPlan build_lockstep(const PipeShape& shape, const std::vector<ComputeOrder>& orders) {
  const int p = shape.stages;
  bool trains = false;
  for (const auto& order : orders) {
    for (const ComputeOp& op : order) trains = trains || op.kind != OpKind::kForwardPass;
  }
  Completion done(shape);
  std::vector<std::size_t> next(p, 0);
  std::vector<BufferPool> pools(p);
  // Buffer of each (virtual stage, micro-batch) while its activation lives.
  std::vector<int> buffer_of(static_cast<std::size_t>(shape.virtual_stages()) *
                             shape.micro_batches);
  LockstepPlan plan;
  plan.stage_steps.resize(p);

  std::size_t remaining = 0;
  for (const auto& order : orders) remaining += order.size();
  // One pass of stage s into `step`.
  auto run = [&](int s, const ComputeOp& op, int round, Step& step) {
    const int vs = shape.virtual_stage(s, op.chunk);
    int& buffer = buffer_of[static_cast<std::size_t>(vs) * shape.micro_batches + op.micro_batch];
    if (op.kind == OpKind::kForwardPass) buffer = pools[s].take();
    emit(shape, s, op, buffer, step);
    if (op.kind == OpKind::kForwardPass) done.set_forward(vs, op.micro_batch, round);
    if (op.kind == OpKind::kBackwardPass || op.kind == OpKind::kBackwardInput) {
      done.set_backward(vs, op.micro_batch, round);
    }
    // The activation dies with the last pass that needs it.
    if (!trains || op.kind == OpKind::kBackwardPass || op.kind == OpKind::kBackwardWeight) {
      pools[s].release(buffer);
    }
    --remaining;
  };
  // An F&B pair (DualPipeV's) shares one step once both halves can run; a round in which
  // no rank could move runs again with pairs split (the forward alone), as PyTorch runs a
  // pair's halves in turn.
  bool split_pairs = false;
  for (int round = 0; remaining > 0;) {
    std::vector<Step> steps(p);
    bool progressed = false;
    for (int s = 0; s < p; ++s) {
      const auto& order = orders[s];
      const bool pair = !split_pairs && next[s] + 1 < order.size() && order[next[s] + 1].paired;
      if (next[s] < order.size() && ready(shape, s, order[next[s]], done, round) &&
          (!pair || ready(shape, s, order[next[s] + 1], done, round))) {
        run(s, order[next[s]++], round, steps[s]);
        if (pair) run(s, order[next[s]++], round, steps[s]);
        progressed = true;
      }
    }
    if (!progressed && !split_pairs) {
      split_pairs = true;  // the same round again
      continue;
    }
    if (!progressed) throw std::logic_error(deadlock_text(shape, orders, next, done, round));
    for (int s = 0; s < p; ++s) plan.stage_steps[s].push_back(std::move(steps[s]));
    split_pairs = false;
    ++round;
  }
  for (int s = 0; s < p; ++s) {
    if (trains) {
      Step& last = plan.stage_steps[s].back();
      last.push_back({OpKind::kReduceTiedGrads});
      last.push_back({OpKind::kReduceGrads});
      last.push_back({OpKind::kOptimizerStep});
    }
    plan.num_pipe_buffers.push_back(pools[s].high_water());
  }
  return plan;
}

}  // namespace pipetrain::schedule
