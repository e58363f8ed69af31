#include "schedule/measured_costs.h"

#include <algorithm>

namespace pipetrain::schedule {

MeasuredCosts::MeasuredCosts(int stages, int chunks)
    : chunks_(chunks),
      sums_(stages, std::vector<double>(kNumOpKinds, 0)),
      counts_(stages, std::vector<double>(kNumOpKinds, 0)) {}

void MeasuredCosts::add(int stage, OpKind kind, double duration) {
  if (!is_compute(kind)) return;
  sums_.at(stage)[static_cast<int>(kind)] += duration;
  counts_.at(stage)[static_cast<int>(kind)] += 1;
}

CostModel MeasuredCosts::costs() const {
  CostModel costs;
  const int stages = static_cast<int>(sums_.size());
  costs.forward.assign(stages, 0);
  costs.backward.assign(stages, 0);
  costs.weight.assign(stages, 0);
  for (int s = 0; s < stages; ++s) {
    costs.forward[s] = mean(s, OpKind::kForwardPass);
    costs.weight[s] = mean(s, OpKind::kBackwardWeight);
    // A micro-batch's whole backward: a full pass, or an input and a weight gradient (some
    // schedules run both kinds, e.g. DualPipeV).
    auto sum = [&](OpKind kind) { return sums_[s][static_cast<int>(kind)]; };
    auto count = [&](OpKind kind) { return counts_[s][static_cast<int>(kind)]; };
    const double backwards = count(OpKind::kBackwardPass) + count(OpKind::kBackwardInput);
    costs.backward[s] = backwards > 0
                            ? chunks_ *
                                  (sum(OpKind::kBackwardPass) + sum(OpKind::kBackwardInput) +
                                   sum(OpKind::kBackwardWeight)) /
                                  backwards
                            : 0.0;
    // Each mean is of its own passes: where W passes are few (DualPipeV splits some
    // backwards only) a slow one can lift W's mean past the whole backward's. A micro-
    // batch's weight gradient is part of its backward, as the simulator requires.
    costs.weight[s] = std::min(costs.weight[s], costs.backward[s]);
  }
  return costs;
}

double MeasuredCosts::mean(int stage, OpKind kind) const {
  const int k = static_cast<int>(kind);
  return counts_[stage][k] > 0 ? chunks_ * sums_[stage][k] / counts_[stage][k] : 0.0;
}

}  // namespace pipetrain::schedule
