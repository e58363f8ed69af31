#include <gtest/gtest.h>

#include <algorithm>

#include "bubble.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/schedule/simulator.h"
#include "schedule/measured_costs.h"

namespace pipetrain::schedule {
namespace {

using testing::bubble;

int peak_memory(const Timeline& timeline) {
  int peak = 0;
  for (const auto& stage : timeline.stages) peak = std::max(peak, stage.peak_live_activations);
  return peak;
}

Timeline run(const std::string& kind, PipeShape shape, const CostModel& costs = {}) {
  return simulate(plan_pipeline(kind, shape), costs);
}

TEST(Simulator, UniformOneFOneBAndGPipeHitTheClosedFormBubble) {
  for (const std::string kind : {"train", "gpipe"}) {
    for (int p : {1, 2, 4, 8}) {
      for (int m : {1, 4, 8, 32}) {
        const double closed_form = static_cast<double>(p - 1) / (m + p - 1);
        EXPECT_NEAR(bubble(run(kind, {m, p})), closed_form, 0.01)
            << kind << " m=" << m << " p=" << p;
      }
    }
  }
}

TEST(Simulator, ZeroBubbleH1HasLessBubbleAtTheSameMemory) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 4 * p}) {
      const Timeline one_f_one_b = run("train", {m, p});
      const Timeline zb = run("zb-h1", {m, p});
      EXPECT_LT(bubble(zb), bubble(one_f_one_b)) << "m=" << m << " p=" << p;
      EXPECT_EQ(peak_memory(zb), peak_memory(one_f_one_b)) << "m=" << m << " p=" << p;
      // Forward, input- and weight-gradient all cost 1: ZB-H1's bubble is (p-1) units.
      EXPECT_DOUBLE_EQ(zb.makespan, 3.0 * m + p - 1);
    }
  }
}

TEST(Simulator, InterleavingShrinksTheBubbleByTheChunkCount) {
  const int m = 8, p = 4, v = 2;
  const Timeline interleaved = run("interleaved", {m, p, v});
  EXPECT_NEAR(bubble(interleaved), static_cast<double>(p - 1) / (v * m + p - 1), 1e-9);
}

TEST(Simulator, TransfersAndPerStageCostsShapeTheTimeline) {
  CostModel costs;
  costs.forward = {1.0, 3.0};
  costs.backward = {2.0};
  costs.weight = {1.0};
  costs.latency = 0.25;
  costs.bandwidth = 1000;
  costs.message_bytes = 250;  // + 0.25 s on the wire
  // Stage 0 forward [0,1]; arrives 1.5; stage 1 forward [1.5,4.5], backward [4.5,6.5];
  // the gradient arrives at 7; stage 0 backward [7,9].
  const Timeline timeline = run("train", {1, 2}, costs);
  EXPECT_DOUBLE_EQ(timeline.makespan, 9.0);
  EXPECT_DOUBLE_EQ(timeline.stages[1].busy, 5.0);
  ASSERT_EQ(timeline.boxes.size(), 4u);
}

// Measured costs: a micro-batch's backward is its full pass, or its input and weight passes
// together; W's own mean is capped by it (few W passes, one of them slow, could exceed it).
TEST(MeasuredCosts, KeepTheWeightGradientWithinTheBackward) {
  MeasuredCosts measured(1, 1);
  measured.add(0, OpKind::kForwardPass, 1.0);
  measured.add(0, OpKind::kBackwardPass, 2.0);
  measured.add(0, OpKind::kBackwardPass, 2.0);
  measured.add(0, OpKind::kBackwardInput, 1.0);
  measured.add(0, OpKind::kBackwardWeight, 1.0);
  CostModel costs = measured.costs();
  EXPECT_DOUBLE_EQ(costs.backward[0], (2.0 + 2.0 + 1.0 + 1.0) / 3);
  EXPECT_DOUBLE_EQ(costs.weight[0], 1.0);
  measured.add(0, OpKind::kBackwardInput, 0.1);
  measured.add(0, OpKind::kBackwardWeight, 9.0);  // one slow W pass
  costs = measured.costs();
  EXPECT_DOUBLE_EQ(costs.backward[0], (2.0 + 2.0 + 1.0 + 1.0 + 0.1 + 9.0) / 4);
  EXPECT_DOUBLE_EQ(costs.weight[0], costs.backward[0]);  // 5.0 measured, capped
  EXPECT_NO_THROW(costs.check(1));
}

TEST(Simulator, RejectsInconsistentCosts) {
  CostModel costs;
  costs.forward = {1.0, 1.0, 1.0};
  EXPECT_THROW(run("train", {4, 2}, costs), io::InputError);
  costs = {};
  costs.weight = {3.0};  // more than the whole backward
  EXPECT_THROW(run("zb-h1", {4, 2}, costs), io::InputError);
  costs = {};
  costs.latency = -1;
  EXPECT_THROW(run("train", {4, 2}, costs), io::InputError);
}

}  // namespace
}  // namespace pipetrain::schedule
