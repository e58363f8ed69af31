// NCCL matches the transfers between two ranks by their order alone. Which plans survive
// that: every plan's transfers agree in order per pair of stages; those whose sends may
// block until received (1F1B, GPipe, inference, one chunk) need nothing more; ZB-H1 and
// interleaving have neighbours that send to each other at once, and grouping each run of
// consecutive transfers (a batch_isend_irecv per run) does not save them.
#include "schedule/pair_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace pipetrain::schedule {
namespace {

// Every plan of every kind over a range of shapes.
template <typename Check>
void for_every_plan(Check check) {
  int plans = 0;
  for (const auto& kind : schedule_kinds()) {
    for (int stages : {1, 2, 3, 4, 8}) {
      for (int chunks : {1, 2, 3}) {
        if (chunks > 1 && (!kind.uses_chunks || stages < 2)) continue;
        for (int micro_batches : {1, 2, 3, 4, 8, 9}) {
          PipelinePlan plan;
          try {
            plan = plan_pipeline(kind.kind, shape_for(kind.kind, micro_batches, stages, chunks));
          } catch (const std::exception&) {
            continue;  // a shape the kind refuses (e.g. interleaving with m < p)
          }
          check(plan, std::string(kind.name) + " p" + std::to_string(stages) + " c" +
                          std::to_string(chunks) + " m" + std::to_string(micro_batches));
          ++plans;
        }
      }
    }
  }
  EXPECT_GT(plans, 150);
}

// Plans whose pairs carry two flows one way (activations of one chunk, gradients of
// another) in another order than they are received: the V kinds and interleaved zero
// bubble. Their pipes stay on MPI, whose tags keep the flows apart.
bool crosses_flows(const PipelinePlan& plan) {
  return plan.kind == Kind::kZbv || plan.kind == Kind::kDualPipeV ||
         (plan.kind == Kind::kInterleavedZb && plan.shape.chunks > 1);
}

TEST(PairOrder, EveryPlanSendsEachPairItsTransfersInTheOrderTheyAreReceived) {
  int crossing = 0;
  for_every_plan([&](const PipelinePlan& plan, const std::string& name) {
    const auto mismatch = first_order_mismatch(plan);
    if (crosses_flows(plan)) {
      crossing += mismatch.has_value();
      return;
    }
    EXPECT_FALSE(mismatch) << name << ": " << mismatch->to_string();
  });
  EXPECT_GT(crossing, 0);
}

TEST(PairOrder, SwappedReceivesFromOnePeerAreFound) {
  PipelinePlan plan = plan_pipeline(Kind::kGpipe, {4, 2, 1});
  // Stage 1's first two receives of activations, taken in the other order.
  std::vector<Instruction*> receives;
  for (auto& step : plan.stage_steps[1]) {
    for (auto& in : step) {
      if (in.kind == OpKind::kRecvActivation) receives.push_back(&in);
    }
  }
  ASSERT_GE(receives.size(), 2u);
  std::swap(receives[0]->micro_batch, receives[1]->micro_batch);
  const auto mismatch = first_order_mismatch(plan);
  ASSERT_TRUE(mismatch);
  EXPECT_EQ(mismatch->stage, 1);
  EXPECT_NE(mismatch->reason.find("waits for the activation of micro-batch 1"), std::string::npos)
      << mismatch->reason;
  EXPECT_NE(mismatch->reason.find("would get the activation of micro-batch 0"), std::string::npos)
      << mismatch->reason;
}

TEST(PairOrder, ASendWithoutItsReceiveIsFound) {
  PipelinePlan plan = plan_pipeline(Kind::k1F1B, {2, 2, 1});
  for (auto& step : plan.stage_steps[1]) {
    step.erase(std::remove_if(step.begin(), step.end(),
                              [](const Instruction& in) {
                                return in.kind == OpKind::kRecvActivation && in.micro_batch == 1;
                              }),
               step.end());
  }
  const auto mismatch = first_order_mismatch(plan);
  ASSERT_TRUE(mismatch);
  EXPECT_EQ(mismatch->stage, 0);
  EXPECT_NE(mismatch->reason.find("has no receive"), std::string::npos) << mismatch->reason;
}

TEST(PairOrder,
     BlockingSendsMatchedByOrderCarryTheOneChunkSchedulesButNotZeroBubbleOrInterleaving) {
  for_every_plan([](const PipelinePlan& plan, const std::string& name) {
    const bool in_flight = plan.shape.micro_batches > 1;  // one micro-batch never overlaps
    if (plan.shape.stages > 1 && in_flight &&
        (plan.kind == Kind::kZbH1 || plan.kind == Kind::kZbH2 ||
         plan.kind == Kind::kInterleavedZb || plan.kind == Kind::kInterleaved)) {
      EXPECT_FALSE(runs_matched_by_order(plan)) << name;  // neighbours send to each other at once
    } else if (plan.shape.chunks == 1) {
      EXPECT_TRUE(runs_matched_by_order(plan)) << name;
    }
  });
}

TEST(PairOrder, GroupingEachRunOfTransfersDoesNotSaveZbH1) {
  const auto deadlock = first_grouped_deadlock(plan_pipeline(Kind::kZbH1, {2, 2, 1}));
  ASSERT_TRUE(deadlock);
  // Stage 0 sends micro-batch 1's activation while stage 1 sends micro-batch 0's gradient.
  EXPECT_EQ(deadlock->stage, 0);
  EXPECT_EQ(deadlock->instruction.kind, OpKind::kSendActivation);
  EXPECT_NE(deadlock->reason.find("deadlock"), std::string::npos);
  for (Kind kind : {Kind::k1F1B, Kind::kGpipe, Kind::kInference}) {
    for (int stages : {2, 4}) {
      const auto plan = plan_pipeline(kind, {8, stages, 1});
      EXPECT_FALSE(first_grouped_deadlock(plan)) << name(kind) << " p" << stages;
    }
  }
}

TEST(TransferGroups, RunsOfConsecutiveTransfersInAStepFormOneGroup) {
  const std::vector<Step> steps{{{OpKind::kRecvActivation, 0},
                                 {OpKind::kForwardPass, 0},
                                 {OpKind::kSendActivation, 0},
                                 {OpKind::kRecvGrad, 1}},
                                {{OpKind::kSendGrad, 1}}};
  const auto groups = transfer_groups(steps);
  ASSERT_EQ(groups.size(), 4u);
  EXPECT_EQ(groups[0].count, 1);  // the receive alone: the forward pass follows
  EXPECT_EQ(groups[1].count, 1);  // the forward pass
  EXPECT_EQ(groups[2].first, 2);
  EXPECT_EQ(groups[2].count, 2);  // send and receive together
  EXPECT_EQ(groups[3].step, 1);   // a step boundary ends a group
}

}  // namespace
}  // namespace pipetrain::schedule

namespace pipetrain::schedule {
namespace {

// Every plan has lanes that carry it: one per pair of stages where its orders agree, one per
// channel where chunks pass each other; a V crosses flows (and takes lanes per channel).
TEST(PipeLanes, EveryPlanHasLanesThatCarryIt) {
  int per_channel = 0;
  for_every_plan([&](const PipelinePlan& plan, const std::string& name) {
    const auto lanes = pipe_lanes({plan});
    ASSERT_TRUE(lanes) << name;
    EXPECT_TRUE(lanes_carry(*lanes, plan)) << name;
    const bool split = std::any_of(lanes->begin(), lanes->end(),
                                   [](const PipeLane& lane) { return lane.channel.has_value(); });
    EXPECT_EQ(split, first_order_mismatch(plan).has_value()) << name;
    per_channel += split;
  });
  EXPECT_GT(per_channel, 0);
}

TEST(PipeLanes, OneChunkTakesOneLaneEachWayBetweenNeighbours) {
  const auto lanes = pipe_lanes({plan_pipeline(Kind::k1F1B, {8, 4, 1})});
  ASSERT_TRUE(lanes);
  const std::vector<PipeLane> expected = {{0, 1, std::nullopt}, {1, 0, std::nullopt},
                                          {1, 2, std::nullopt}, {2, 1, std::nullopt},
                                          {2, 3, std::nullopt}, {3, 2, std::nullopt}};
  EXPECT_EQ(*lanes, expected);
}

// Interleaving over 4 stages: chunk 0's last stage feeds chunk 1's first over a ring link
// 3 -> 0 (and the gradients come back 0 -> 3).
TEST(PipeLanes, InterleavingOverFourStagesHasARingLink) {
  const auto lanes = pipe_lanes({plan_pipeline(Kind::kInterleaved, {8, 4, 2})});
  ASSERT_TRUE(lanes);
  const auto joins = [&](int from, int to) {
    return std::any_of(lanes->begin(), lanes->end(),
                       [&](const PipeLane& l) { return l.from == from && l.to == to; });
  };
  EXPECT_TRUE(joins(3, 0));
  EXPECT_TRUE(joins(0, 3));
  EXPECT_FALSE(joins(0, 2));
  EXPECT_FALSE(joins(1, 3));
}

// A V's chunk-0 activations and chunk-1 gradients both go down between neighbours, in
// another order than they are received: a lane each.
TEST(PipeLanes, AVSplitsItsFlowsIntoLanesPerChannel) {
  const PipelinePlan plan = plan_pipeline(Kind::kZbv, shape_for(Kind::kZbv, 8, 4, 2));
  ASSERT_TRUE(first_order_mismatch(plan));
  const auto lanes = pipe_lanes({plan});
  ASSERT_TRUE(lanes);
  const PipeLane activations{0, 1, Channel::activations(0)}, gradients{0, 1, Channel::gradients(1)};
  EXPECT_NE(std::find(lanes->begin(), lanes->end(), activations), lanes->end());
  EXPECT_NE(std::find(lanes->begin(), lanes->end(), gradients), lanes->end());
  for (const PipeLane& lane : *lanes) EXPECT_EQ(std::abs(lane.from - lane.to), 1);  // no ring
}

// Where one of the plans run over the same lanes needs a pair split per channel, the pair
// is split for all of them (the V's evaluation alone keeps each pair's order).
TEST(PipeLanes, APairTakesLanesPerChannelWhereAnyPlanNeedsThem) {
  const PipeShape shape = shape_for(Kind::kZbv, 8, 4, 2);
  const PipelinePlan train = plan_pipeline(Kind::kZbv, shape);
  const PipelinePlan evaluation = plan_pipeline(Kind::kInference, shape);
  ASSERT_TRUE(first_order_mismatch(train));
  ASSERT_FALSE(first_order_mismatch(evaluation));
  const auto alone = pipe_lanes({evaluation});
  const auto both = pipe_lanes({evaluation, train});
  ASSERT_TRUE(alone && both);
  const auto split = [](const std::vector<PipeLane>& lanes) {
    return std::any_of(lanes.begin(), lanes.end(),
                       [](const PipeLane& lane) { return lane.channel.has_value(); });
  };
  EXPECT_FALSE(split(*alone));
  EXPECT_TRUE(split(*both));
  EXPECT_TRUE(lanes_carry(*both, evaluation));
  EXPECT_TRUE(lanes_carry(*both, train));
  EXPECT_FALSE(lanes_carry(*alone, train));
}

// Lanes laid for one plan do not carry another whose pair orders differ, and a channel whose
// own transfers come out of order has no lanes at all.
TEST(PipeLanes, LanesAreCheckedAgainstEachPlan) {
  const auto one = pipe_lanes({plan_pipeline(Kind::k1F1B, {8, 4, 1})});
  ASSERT_TRUE(one);
  PipelinePlan swapped = plan_pipeline(Kind::kGpipe, {4, 4, 1});
  std::vector<Instruction*> receives;
  for (auto& step : swapped.stage_steps[1])
    for (auto& in : step)
      if (in.kind == OpKind::kRecvActivation) receives.push_back(&in);
  ASSERT_GE(receives.size(), 2u);
  std::swap(receives[0]->micro_batch, receives[1]->micro_batch);
  EXPECT_FALSE(lanes_carry(*one, swapped));
  EXPECT_FALSE(pipe_lanes({swapped}));
  const PipelinePlan v = plan_pipeline(Kind::kDualPipeV, shape_for(Kind::kDualPipeV, 8, 4, 2));
  EXPECT_FALSE(lanes_carry(*one, v));
  EXPECT_TRUE(lanes_carry(*pipe_lanes({v}), v));
}

}  // namespace
}  // namespace pipetrain::schedule
