// DeepSpeed's schedules pinned to the contract in docs/spec/schedules.md.
#include <gtest/gtest.h>

#include "pipetrain/io/errors.h"
#include "schedule/deepspeed_schedules.h"

namespace pipetrain::schedule {
namespace {

// A step written as the spec writes it: (name, buffer) pairs, micro-batches ignored.
using Spelled = std::vector<std::pair<std::string, int>>;

std::vector<Spelled> spell(const std::vector<Step>& steps) {
  std::vector<Spelled> out;
  for (const auto& step : steps) {
    Spelled spelled;
    for (const auto& instr : step)
      spelled.emplace_back(std::string(name(instr.kind)), instr.buffer);
    out.push_back(spelled);
  }
  return out;
}

TEST(TrainSchedule, MatchesTheSpecWorkedExample) {
  const TrainSchedule schedule({.micro_batches = 4, .stages = 3}, 1);
  EXPECT_EQ(schedule.num_pipe_buffers(), 2);
  const std::vector<Spelled> expected = {
      {},
      {{"RecvActivation", 0}, {"ForwardPass", 0}},
      {{"SendActivation", 0}},
      {{"RecvActivation", 1}, {"ForwardPass", 1}},
      {{"RecvGrad", 0}, {"SendActivation", 1}, {"BackwardPass", 0}},
      {{"SendGrad", 0}, {"RecvActivation", 0}, {"ForwardPass", 0}},
      {{"RecvGrad", 1}, {"SendActivation", 0}, {"BackwardPass", 1}},
      {{"SendGrad", 1}, {"RecvActivation", 1}, {"ForwardPass", 1}},
      {{"RecvGrad", 0}, {"SendActivation", 1}, {"BackwardPass", 0}},
      {{"SendGrad", 0}},
      {{"RecvGrad", 1}, {"BackwardPass", 1}},
      {{"SendGrad", 1}, {"ReduceTiedGrads", -1}, {"ReduceGrads", -1}, {"OptimizerStep", -1}},
  };
  EXPECT_EQ(spell(schedule.steps()), expected);
}

TEST(InferenceSchedule, MatchesTheSpecOnTwoStages) {
  const InferenceSchedule first({.micro_batches = 2, .stages = 2}, 0);
  const std::vector<Spelled> first_expected = {
      {{"LoadMicroBatch", 0}, {"ForwardPass", 0}},
      {{"LoadMicroBatch", 1}, {"SendActivation", 0}, {"ForwardPass", 1}},
      {{"SendActivation", 1}},
  };
  EXPECT_EQ(spell(first.steps()), first_expected);

  const InferenceSchedule last({.micro_batches = 2, .stages = 2}, 1);
  const std::vector<Spelled> last_expected = {
      {},
      {{"LoadMicroBatch", 0}, {"RecvActivation", 0}, {"ForwardPass", 0}},
      {{"LoadMicroBatch", 1}, {"RecvActivation", 1}, {"ForwardPass", 1}},
  };
  EXPECT_EQ(spell(last.steps()), last_expected);
  EXPECT_EQ(last.num_pipe_buffers(), 2);
}

TEST(DataParallelSchedule, RunsEachMicroBatchThenSteps) {
  const DataParallelSchedule schedule({.micro_batches = 2, .stages = 1}, 0);
  const std::vector<Spelled> expected = {
      {{"LoadMicroBatch", 0}, {"ForwardPass", 0}, {"BackwardPass", 0}},
      {{"LoadMicroBatch", 0},
       {"ForwardPass", 0},
       {"BackwardPass", 0},
       {"ReduceGrads", -1},
       {"OptimizerStep", -1}},
  };
  EXPECT_EQ(spell(schedule.steps()), expected);
  EXPECT_EQ(schedule.num_pipe_buffers(), 1);
}

TEST(DataParallelSchedule, RefusesAPipeline) {
  EXPECT_THROW(DataParallelSchedule({.micro_batches = 2, .stages = 2}, 0), io::InputError);
}

TEST(TrainSchedule, BufferCountFollowsTheSpec) {
  for (int m = 1; m <= 8; ++m) {
    for (int p = 1; p <= 6; ++p) {
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(TrainSchedule({.micro_batches = m, .stages = p}, s).num_pipe_buffers(),
                  std::max(2, std::min(p - s, m)));
      }
    }
  }
}

}  // namespace
}  // namespace pipetrain::schedule
