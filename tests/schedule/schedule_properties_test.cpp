// Every schedule kind, over m in 1..32 and p in 1..16: the validator accepts it, every
// stage has the same number of steps, and buffer and step counts are as documented.
#include <gtest/gtest.h>

#include <algorithm>

#include "pipetrain/io/errors.h"
#include "pipetrain/schedule/schedule.h"
#include "pipetrain/schedule/simulator.h"
#include "pipetrain/schedule/validator.h"
#include "schedule/deepspeed_schedules.h"

namespace pipetrain::schedule {
namespace {

struct Case {
  std::string kind;
  int chunks = 1;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.kind << " with " << c.chunks << " chunk(s)";
}

class EveryShape : public ::testing::TestWithParam<Case> {};

int max_stages(const Case& c) {
  return c.kind == "data-parallel" ? 1 : 16;
}

// The shapes a kind refuses (its source's conditions).
bool refuses(const Case& c, int m, int p) {
  if (c.kind == "interleaved") return c.chunks > 1 && m % p != 0;
  if (c.kind == "interleaved-zb") return m % std::max(1, m / p) != 0;
  if (c.kind == "dualpipev") return m < 2 * p;
  return false;
}

TEST_P(EveryShape, ValidatesWithConsistentStepsAndBuffers) {
  const Case& c = GetParam();
  for (int m = 1; m <= 32; ++m) {
    for (int p = 1; p <= max_stages(c); ++p) {
      if (refuses(c, m, p)) {
        EXPECT_THROW(plan_pipeline(c.kind, {m, p, c.chunks}), io::InputError);
        continue;
      }
      const PipeShape shape{m, p, c.chunks};
      const PipelinePlan plan = plan_pipeline(c.kind, shape);
      SCOPED_TRACE(c.kind + " m=" + std::to_string(m) + " p=" + std::to_string(p));
      const auto violation = validate(plan);
      ASSERT_FALSE(violation) << violation->to_string();

      const std::size_t steps = plan.stage_steps[0].size();
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(plan.stage_steps[s].size(), steps);
        EXPECT_GE(plan.num_pipe_buffers[s], 1);
      }
      if (c.kind == "train" || c.kind == "gpipe" || (c.kind == "interleaved" && c.chunks == 1)) {
        EXPECT_EQ(steps, static_cast<std::size_t>(2 * (m + p - 1)));
      }
      if (c.kind == "inference") {
        EXPECT_EQ(steps, static_cast<std::size_t>(m + p - 1));
      }
      if (c.kind == "data-parallel") {
        EXPECT_EQ(steps, static_cast<std::size_t>(m));
      }
      for (int s = 0; s < p; ++s) {
        const int buffers = plan.num_pipe_buffers[s];
        if (c.kind == "train") {
          EXPECT_EQ(buffers, std::max(2, std::min(p - s, m)));
        }
        if (c.kind == "inference") {
          EXPECT_EQ(buffers, 2);
        }
        if (c.kind == "gpipe") {
          EXPECT_EQ(buffers, m);
        }
        if (c.kind == "interleaved" && c.chunks == 1) {
          EXPECT_EQ(buffers, std::min(p - s, m));
        }
        if (c.kind == "interleaved") {
          EXPECT_LE(buffers, m * c.chunks);
        }
        // ZB-H1 keeps 1F1B's peak: at most P micro-batches in flight on any stage.
        if (c.kind == "zb-h1") {
          EXPECT_EQ(buffers, std::min(p, m));
        }
        // ZB-H2 holds up to 2P-1 (the paper's table), stage 0 the most.
        if (c.kind == "zb-h2") {
          EXPECT_LE(buffers, std::min(m, 2 * p - 1));
          if (s == 0) {
            EXPECT_EQ(buffers, std::min(m, 2 * p - 1));
          }
        }
        // ZBV: as 1F1B, P micro-batches of the whole stage (2P of half its layers);
        // DualPipeV: P + 1 chunk micro-batches with P = 2p model stages.
        if (c.kind == "zbv") EXPECT_LE(buffers, 2 * p);
        if (c.kind == "dualpipev") EXPECT_LE(buffers, 2 * p + 1);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, EveryShape,
                         ::testing::Values(Case{"train"}, Case{"inference"}, Case{"data-parallel"},
                                           Case{"gpipe"}, Case{"interleaved", 1},
                                           Case{"interleaved", 2}, Case{"interleaved", 3},
                                           Case{"zb-h1"}, Case{"zb-h2"}, Case{"interleaved-zb", 1},
                                           Case{"interleaved-zb", 2}, Case{"interleaved-zb", 3},
                                           Case{"looped-bfs", 1}, Case{"looped-bfs", 2},
                                           Case{"zbv", 2}, Case{"dualpipev", 2}),
                         [](const auto& info) {
                           std::string name = info.param.kind + std::to_string(info.param.chunks);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(Schedule, InstructionsCarryTheirChunk) {
  const PipelinePlan plan =
      plan_pipeline("interleaved", {.micro_batches = 4, .stages = 2, .chunks = 2});
  int chunk_one = 0;
  for (const auto& step : plan.stage_steps[1]) {
    for (const auto& in : step) chunk_one += in.kind == OpKind::kForwardPass && in.chunk == 1;
  }
  EXPECT_EQ(chunk_one, 4);  // every micro-batch passes stage 1's second chunk once
}

TEST(Schedule, TransferPeersWrapAroundChunks) {
  const PipeShape shape{.micro_batches = 4, .stages = 2, .chunks = 2};
  const Peer to_next = transfer_peer(shape, 1, {OpKind::kSendActivation, 0, 0, 0});
  EXPECT_EQ(to_next.stage, 0);  // the last stage's chunk 0 feeds the first stage's chunk 1
  EXPECT_EQ(to_next.chunk, 1);
  const Peer from_prev = transfer_peer(shape, 0, {OpKind::kRecvActivation, 0, 1, 0});
  EXPECT_EQ(from_prev.stage, 1);
  EXPECT_EQ(from_prev.chunk, 0);
  EXPECT_THROW(transfer_peer(shape, 0, {OpKind::kSendGrad, 0, 0, 0}), std::logic_error);
}

TEST(Schedule, BadArgumentsAreInputErrors) {
  EXPECT_THROW(plan_pipeline("train", {.micro_batches = 4, .stages = 0}), io::InputError);
  EXPECT_THROW(plan_pipeline("train", {.micro_batches = 0, .stages = 2}), io::InputError);
  EXPECT_THROW(TrainSchedule({.micro_batches = 4, .stages = 2}, 2), io::InputError);
  EXPECT_THROW(TrainSchedule({.micro_batches = 4, .stages = 2}, -1), io::InputError);
  EXPECT_THROW(plan_pipeline(Kind::kZbH1, {.micro_batches = 4, .stages = 2, .chunks = 2}),
               io::InputError);
  EXPECT_THROW(plan_pipeline("pipedream", {.micro_batches = 4, .stages = 2}), io::InputError);
  EXPECT_EQ(plan_pipeline(Kind::kGpipe, {.micro_batches = 4, .stages = 2}).num_pipe_buffers[1], 4);
}

// The passes of a stage, in order (what a schedule computes, without transfers or buffers).
std::vector<std::pair<OpKind, int>> passes(const std::vector<Step>& steps) {
  std::vector<std::pair<OpKind, int>> found;
  for (const auto& step : steps) {
    for (const auto& in : step) {
      if (is_compute(in.kind)) found.emplace_back(in.kind, in.micro_batch);
    }
  }
  return found;
}

// DeepSpeed's TrainSchedule (the spec's, written step by step) and the interleaved order at
// one chunk (Megatron's 1F1B, built from compute orders) are one 1F1B: the same passes in
// the same order on every stage and as many steps; only the buffer count differs (DeepSpeed
// keeps at least 2).
TEST(Schedule, DeepSpeedsTrainScheduleAndInterleavingAtOneChunkRunTheSamePasses) {
  for (int p = 1; p <= 5; ++p) {
    for (int m = 1; m <= 9; ++m) {
      SCOPED_TRACE("m=" + std::to_string(m) + " p=" + std::to_string(p));
      const PipelinePlan deepspeed = plan_pipeline(Kind::k1F1B, {m, p});
      const PipelinePlan megatron = plan_pipeline(Kind::kInterleaved, {m, p, 1});
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(passes(deepspeed.stage_steps[s]), passes(megatron.stage_steps[s]));
        EXPECT_EQ(deepspeed.stage_steps[s].size(), megatron.stage_steps[s].size());
      }
    }
  }
}

TEST(Schedule, EveryKindHasOneNameThatParsesBackToIt) {
  for (const auto& info : schedule_kinds()) {
    EXPECT_EQ(schedule_kind(info.name).kind, info.kind);
    EXPECT_EQ(name(info.kind), info.name);
  }
}

}  // namespace
}  // namespace pipetrain::schedule
