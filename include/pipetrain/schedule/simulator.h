#pragma once

#include <vector>

#include "pipetrain/schedule/schedule.h"

namespace pipetrain::schedule {

// Per-stage pass costs (seconds) and a latency/bandwidth model of point-to-point
// transfers. A list with one value applies to every stage. A stage's cost covers all
// its layers: with several model chunks, each chunk's pass costs 1/chunks of it.
struct CostModel {
  std::vector<double> forward{1.0};
  std::vector<double> backward{2.0};  // input and weight gradients together
  std::vector<double> weight{1.0};    // the weight-gradient part of `backward`
  double latency = 0.0;               // per message
  double bandwidth = 0.0;             // bytes per second; 0 means transfers are free
  double message_bytes = 0.0;         // bytes per activation or gradient

  // Throws InputError naming the field that is negative, mis-sized or inconsistent.
  void check(int stages) const;
  double forward_cost(int stage) const;
  double backward_cost(int stage) const;
  double weight_cost(int stage) const;
  double transfer_time() const;
};

struct TimelineBox {
  int stage = 0;
  OpKind kind{};  // a compute kind
  int micro_batch = 0;
  int chunk = 0;
  double start = 0;
  double end = 0;
};

struct StageSummary {
  double busy = 0;             // seconds of compute
  double bubble_fraction = 0;  // idle share of the makespan
  int peak_live_activations = 0;
};

struct Timeline {
  double makespan = 0;
  std::vector<StageSummary> stages;
  std::vector<TimelineBox> boxes;
};

// Runs each stage's instructions as early as its received data allows: computes take
// their cost, sends do not block, a receive waits for its message. Activations are live
// from forward until their backward (or weight gradient) ends. The plan must be valid.
Timeline simulate(const PipelinePlan& plan, const CostModel& costs);

}  // namespace pipetrain::schedule
