#include "pipetrain/schedule/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <stdexcept>
#include <string>

#include "pipetrain/io/errors.h"

namespace pipetrain::schedule {
namespace {

double per_stage(const std::vector<double>& values, int stage) {
  return values.size() == 1 ? values[0] : values[stage];
}

void check_costs(const std::vector<double>& values, const char* field, int stages) {
  if (values.size() != 1 && static_cast<int>(values.size()) != stages) {
    throw io::InputError(std::string(field) + " needs 1 or " + std::to_string(stages) +
                         " values, got " + std::to_string(values.size()));
  }
  for (double v : values) {
    if (!(v >= 0) || !std::isfinite(v))
      throw io::InputError(std::string(field) + " must be a finite number >= 0, got " +
                           std::to_string(v));
  }
}

struct StageCursor {
  std::vector<Instruction> stream;  // the stage's steps, flattened
  std::size_t next = 0;
  double clock = 0;
  int live = 0;
};

}  // namespace

void CostModel::check(int stages) const {
  check_costs(forward, "forward cost", stages);
  check_costs(backward, "backward cost", stages);
  check_costs(weight, "weight cost", stages);
  for (int s = 0; s < stages; ++s) {
    if (weight_cost(s) > backward_cost(s)) {
      throw io::InputError("weight cost of stage " + std::to_string(s) +
                           " exceeds its backward cost, of which it is a part");
    }
  }
  for (const double v : {latency, bandwidth, message_bytes}) {
    if (!(v >= 0) || !std::isfinite(v))
      throw io::InputError("latency, bandwidth and message bytes must be finite numbers >= 0");
  }
}

double CostModel::forward_cost(int stage) const {
  return per_stage(forward, stage);
}
double CostModel::backward_cost(int stage) const {
  return per_stage(backward, stage);
}
double CostModel::weight_cost(int stage) const {
  return per_stage(weight, stage);
}
double CostModel::transfer_time() const {
  return latency + (bandwidth > 0 ? message_bytes / bandwidth : 0.0);
}

Timeline simulate(const PipelinePlan& plan, const CostModel& costs) {
  const PipeShape& shape = plan.shape;
  costs.check(shape.stages);
  auto cost_of = [&](int stage, OpKind kind) {
    const double chunk_share = 1.0 / shape.chunks;
    switch (kind) {
      case OpKind::kForwardPass:
        return costs.forward_cost(stage) * chunk_share;
      case OpKind::kBackwardPass:
        return costs.backward_cost(stage) * chunk_share;
      case OpKind::kBackwardInput:
        return (costs.backward_cost(stage) - costs.weight_cost(stage)) * chunk_share;
      case OpKind::kBackwardWeight:
        return costs.weight_cost(stage) * chunk_share;
      default:
        return 0.0;
    }
  };

  std::vector<StageCursor> cursors(shape.stages);
  for (int s = 0; s < shape.stages; ++s) {
    for (const auto& step : plan.stage_steps[s]) {
      cursors[s].stream.insert(cursors[s].stream.end(), step.begin(), step.end());
    }
  }
  // Arrival times of messages in flight, per receiving virtual stage.
  std::vector<std::deque<double>> activations(shape.virtual_stages());
  std::vector<std::deque<double>> grads(shape.virtual_stages());

  Timeline timeline;
  timeline.stages.resize(shape.stages);
  bool pending = true;
  while (pending) {
    pending = false;
    bool progressed = false;
    for (int s = 0; s < shape.stages; ++s) {
      StageCursor& cursor = cursors[s];
      StageSummary& summary = timeline.stages[s];
      while (cursor.next < cursor.stream.size()) {
        const Instruction& in = cursor.stream[cursor.next];
        const int vs = shape.virtual_stage(s, in.chunk);
        if (is_recv(in.kind)) {
          auto& channel = in.kind == OpKind::kRecvActivation ? activations[vs] : grads[vs];
          if (channel.empty()) break;
          cursor.clock = std::max(cursor.clock, channel.front());
          channel.pop_front();
        } else if (is_send(in.kind)) {
          auto& channel = in.kind == OpKind::kSendActivation ? activations[vs + 1] : grads[vs - 1];
          const bool local = is_local_transfer(shape, s, in);  // a V's turn: no message
          channel.push_back(cursor.clock + (local ? 0.0 : costs.transfer_time()));
        } else if (is_compute(in.kind)) {
          const double start = cursor.clock;
          cursor.clock += cost_of(s, in.kind);
          summary.busy += cursor.clock - start;
          timeline.boxes.push_back({s, in.kind, in.micro_batch, in.chunk, start, cursor.clock});
          if (in.kind == OpKind::kForwardPass) {
            summary.peak_live_activations = std::max(summary.peak_live_activations, ++cursor.live);
          }
          const bool releases = in.kind == OpKind::kBackwardPass ||
                                in.kind == OpKind::kBackwardWeight ||
                                (in.kind == OpKind::kForwardPass && !plan.trains);
          if (releases) --cursor.live;
        }
        ++cursor.next;
        progressed = true;
      }
      pending = pending || cursor.next < cursor.stream.size();
    }
    if (pending && !progressed)
      throw std::logic_error("simulate: the plan deadlocks; validate it first");
  }

  for (const auto& cursor : cursors) timeline.makespan = std::max(timeline.makespan, cursor.clock);
  for (auto& summary : timeline.stages) {
    summary.bubble_fraction = timeline.makespan > 0 ? 1.0 - summary.busy / timeline.makespan : 0.0;
  }
  return timeline;
}

}  // namespace pipetrain::schedule
