// Break a valid schedule on purpose; the validator must name the fault.
#include <gtest/gtest.h>

#include <functional>

#include "pipetrain/schedule/schedule.h"
#include "pipetrain/schedule/validator.h"

namespace pipetrain::schedule {
namespace {

PipelinePlan train_plan() {
  return plan_pipeline("train", {.micro_batches = 4, .stages = 3});
}

// Location of the n-th (0-based) instruction on `stage` matching `match`.
struct Where {
  int step = -1;
  int index = -1;
};

Where find(const PipelinePlan& plan, int stage,
           const std::function<bool(const Instruction&)>& match, int nth = 0) {
  const auto& steps = plan.stage_steps[stage];
  for (int t = 0; t < static_cast<int>(steps.size()); ++t) {
    for (int i = 0; i < static_cast<int>(steps[t].size()); ++i) {
      if (match(steps[t][i]) && nth-- == 0) return {t, i};
    }
  }
  ADD_FAILURE() << "no such instruction";
  return {};
}

void erase(PipelinePlan& plan, int stage, Where where) {
  auto& step = plan.stage_steps[stage][where.step];
  step.erase(step.begin() + where.index);
}

auto is(OpKind kind, int micro_batch = -1) {
  return [=](const Instruction& in) {
    return in.kind == kind && (micro_batch < 0 || in.micro_batch == micro_batch);
  };
}

Violation expect_violation(const PipelinePlan& plan) {
  const auto violation = validate(plan);
  EXPECT_TRUE(violation.has_value());
  return violation.value_or(Violation{});
}

TEST(ValidatorMutation, TheUnbrokenPlanIsValid) {
  EXPECT_FALSE(validate(train_plan()));
}

TEST(ValidatorMutation, DroppedSendIsADeadlock) {
  PipelinePlan plan = train_plan();
  erase(plan, 0, find(plan, 0, is(OpKind::kSendActivation, 1)));

  const Violation v = expect_violation(plan);
  EXPECT_EQ(v.stage, 1);
  EXPECT_EQ(v.instruction.kind, OpKind::kRecvActivation);
  EXPECT_NE(v.reason.find("deadlock"), std::string::npos) << v.to_string();
}

TEST(ValidatorMutation, SwappedReceiveOrderIsCaught) {
  PipelinePlan plan = train_plan();
  const Where first = find(plan, 1, is(OpKind::kRecvActivation), 0);
  const Where second = find(plan, 1, is(OpKind::kRecvActivation), 1);
  std::swap(plan.stage_steps[1][first.step][first.index],
            plan.stage_steps[1][second.step][second.index]);

  const Violation v = expect_violation(plan);
  EXPECT_EQ(v.stage, 1);
  EXPECT_EQ(v.step, first.step);
  EXPECT_NE(v.reason.find("names micro-batch 1 but acts on micro-batch 0"), std::string::npos)
      << v.to_string();
}

TEST(ValidatorMutation, EarlyBufferReuseIsCaught) {
  PipelinePlan plan = train_plan();
  // Stage 0 has three buffers; load micro-batch 1 into micro-batch 0's buffer.
  const Where load = find(plan, 0, is(OpKind::kLoadMicroBatch, 1));
  plan.stage_steps[0][load.step][load.index].buffer = 0;

  const Violation v = expect_violation(plan);
  EXPECT_EQ(v.stage, 0);
  EXPECT_EQ(v.step, load.step);
  EXPECT_NE(v.reason.find(
                "overwrites buffer 0 while micro-batch 0's activation still waits for backward"),
            std::string::npos)
      << v.to_string();
}

TEST(ValidatorMutation, MissingBackwardIsCaught) {
  PipelinePlan plan = train_plan();
  erase(plan, 0, find(plan, 0, is(OpKind::kBackwardPass, 3)));

  const Violation v = expect_violation(plan);
  EXPECT_EQ(v.stage, 0);
  EXPECT_EQ(v.instruction.kind, OpKind::kReduceTiedGrads);
  EXPECT_NE(v.reason.find("before every backward"), std::string::npos) << v.to_string();
}

TEST(ValidatorMutation, MissingBackwardBeforeASendIsCaught) {
  PipelinePlan plan = train_plan();
  erase(plan, 2, find(plan, 2, is(OpKind::kBackwardPass, 0)));

  const Violation v = expect_violation(plan);
  EXPECT_EQ(v.stage, 2);
  EXPECT_EQ(v.instruction.kind, OpKind::kSendGrad);
  EXPECT_NE(v.reason.find("holds no unsent gradient"), std::string::npos) << v.to_string();
}

TEST(ValidatorMutation, LoadOnAMiddleStageIsCaught) {
  PipelinePlan plan = train_plan();
  plan.stage_steps[1][1].insert(plan.stage_steps[1][1].begin(), {OpKind::kLoadMicroBatch, 1, 0, 0});
  const Violation v = expect_violation(plan);
  EXPECT_EQ(v.stage, 1);
  EXPECT_NE(v.reason.find("needs neither inputs nor labels"), std::string::npos) << v.to_string();
}

TEST(ValidatorMutation, EarlyOptimizerStepIsCaught) {
  PipelinePlan plan = train_plan();
  plan.stage_steps[2][3].push_back({OpKind::kOptimizerStep});
  const Violation v = expect_violation(plan);
  EXPECT_EQ(v.stage, 2);
  EXPECT_EQ(v.step, 3);
  EXPECT_NE(v.reason.find("before every backward"), std::string::npos) << v.to_string();
}

TEST(ValidatorMutation, BackwardInAForwardOnlyScheduleIsCaught) {
  PipelinePlan plan = plan_pipeline("inference", {.micro_batches = 3, .stages = 2});
  plan.stage_steps[1][1].push_back({OpKind::kBackwardPass, 0, 0, 0});
  const Violation v = expect_violation(plan);
  EXPECT_NE(v.reason.find("forward-only"), std::string::npos) << v.to_string();
}

TEST(ValidatorMutation, UnreceivedSendIsCaught) {
  PipelinePlan plan = plan_pipeline("inference", {.micro_batches = 3, .stages = 2});
  const Where recv = find(plan, 1, is(OpKind::kRecvActivation, 2));
  const Where forward = find(plan, 1, is(OpKind::kForwardPass, 2));
  auto& step = plan.stage_steps[1][recv.step];
  ASSERT_EQ(recv.step, forward.step);
  step.erase(step.begin() + forward.index);
  step.erase(step.begin() + recv.index);

  const Violation v = expect_violation(plan);
  EXPECT_EQ(v.stage, 0);
  EXPECT_NE(v.reason.find("sent but never received"), std::string::npos) << v.to_string();
}

TEST(ValidatorMutation, MissingWeightGradientIsCaught) {
  PipelinePlan plan = plan_pipeline("zb-h1", {.micro_batches = 4, .stages = 2});
  erase(plan, 1, find(plan, 1, is(OpKind::kBackwardWeight, 3)));
  const Violation v = expect_violation(plan);
  EXPECT_EQ(v.stage, 1);
  EXPECT_NE(v.reason.find("before every backward"), std::string::npos) << v.to_string();
}

// With sends that complete only when received (MPI's rendezvous for large messages) and no
// barriers, DeepSpeed's streams and GPipe still run; the lockstep 1F1B orders, where a stage
// sends downstream while its neighbour sends upstream, need buffered sends.
TEST(ValidatorSynchronousSends, DeepSpeedAndGPipeNeedNoBuffering) {
  for (const char* kind : {"train", "gpipe"}) {
    for (int p : {2, 3, 4}) {
      for (int m : {1, 4, 8}) {
        const auto violation = validate(plan_pipeline(kind, {.micro_batches = m, .stages = p}),
                                        SendMode::kSynchronous);
        EXPECT_FALSE(violation) << kind << " p" << p << " m" << m << ": "
                                << violation.value_or(Violation{}).to_string();
      }
    }
  }
}

TEST(ValidatorSynchronousSends, CrossingSendsDeadlock) {
  for (const PipeShape shape : {PipeShape{.micro_batches = 4, .stages = 2, .chunks = 2},
                                PipeShape{.micro_batches = 8, .stages = 4, .chunks = 2}}) {
    const PipelinePlan plan = plan_pipeline("interleaved", shape);
    EXPECT_FALSE(validate(plan));
    const Violation v = validate(plan, SendMode::kSynchronous).value_or(Violation{});
    EXPECT_NE(
        v.reason.find("deadlock: sends an activation that stage 1 (chunk 0) does not receive"),
        std::string::npos)
        << v.to_string();
  }
  const PipelinePlan zb = plan_pipeline("zb-h1", {.micro_batches = 8, .stages = 4});
  EXPECT_FALSE(validate(zb));
  EXPECT_TRUE(validate(zb, SendMode::kSynchronous));
}

}  // namespace
}  // namespace pipetrain::schedule
