#include "pipetrain/topology/parallel_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipetrain/io/errors.h"

namespace pipetrain::topology {
namespace {

std::string refusal(const ParallelLayout& asked, int world_size) {
  try {
    resolve_layout(asked, world_size);
  } catch (const io::InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ParallelLayout, ItsKeysAreOneTable) {
  ParallelLayout layout{.data = 0};
  const auto unknown = layout_keys().read(
      nlohmann::json::parse(R"({"pipeline": {"stages": 2, "chunks": 2, "schedule": "zbv"},
                                "model_parallel": 2, "sequence_parallel": true,
                                "context_parallel": 3, "expert_parallel": 4, "seed": 1})"),
      layout);
  EXPECT_EQ(layout.pipe, 2);
  EXPECT_EQ(layout.chunks, 2);
  EXPECT_EQ(layout.data, 0);
  EXPECT_EQ(layout.tensor, 2);
  EXPECT_TRUE(layout.sequence_parallel);
  EXPECT_EQ(layout.context, 3);
  EXPECT_EQ(layout.expert, 4);
  EXPECT_EQ(unknown, (std::vector<std::string>{"pipeline.schedule", "seed"}));
  auto refused = [](const char* text) {
    ParallelLayout l;
    try {
      layout_keys().read(nlohmann::json::parse(text), l);
    } catch (const io::InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(refused(R"({"pipeline": {"stages": 0}})"), "pipeline.stages must be at least 1, got 0");
  EXPECT_EQ(refused(R"({"sequence_parallel": true})"),
            "sequence_parallel splits the sequence over the tensor-parallel group: it needs "
            "model_parallel above 1 (--model), got 1");
}

TEST(ParallelLayout, TheDataSizeIsWhatTheOtherAxesLeave) {
  // Asked with data 0, as JobConfig::layout holds it when data_parallel is not set.
  const ParallelLayout layout =
      resolve_layout({.pipe = 2, .data = 0, .tensor = 2, .context = 2}, 16);
  EXPECT_EQ(layout.data, 2);
  EXPECT_EQ(layout.ranks(), 16);
  EXPECT_EQ(layout.ranks_per_stage(), 8);
  EXPECT_EQ(resolve_layout({.pipe = 2, .data = 4, .expert = 2}, 8).data, 4);
}

TEST(ParallelLayout, RefusesLayoutsThatDoNotFitTheRanksNamingTheAxes) {
  EXPECT_EQ(refusal({.pipe = 3, .data = 0}, 4),
            "pipeline.stages 3 does not divide the job's 4 ranks");
  EXPECT_EQ(refusal({.pipe = 2, .data = 0, .tensor = 2, .context = 2}, 4),
            "pipeline.stages 2 x context_parallel 2 x model_parallel 2 does not divide the "
            "job's 4 ranks");
  EXPECT_EQ(refusal({.pipe = 2, .data = 0}, 1),
            "pipeline.stages 2 does not divide the job's 1 ranks (one process: start the job "
            "with pipetrain launch -n 2 -- ...)");
  EXPECT_EQ(refusal({.pipe = 2, .data = 3}, 4),
            "data-parallel size 3 with 2 stages needs 6 ranks, the job has 4");
  EXPECT_EQ(refusal({.pipe = 1, .data = 0, .expert = 3}, 4),
            "expert_parallel 3 must divide the data-parallel size (4)");
}

TEST(ParallelLayout, ChecksSizesPastAnIntBeforeNarrowingThem) {
  const int64_t huge = (int64_t{1} << 32) + 2;  // 2 once cut to 32 bits
  EXPECT_EQ(refusal({.pipe = 1, .data = huge}, 2),
            "data-parallel size 4294967298 with 1 stages needs 4294967298 ranks, the job has 2");
  EXPECT_EQ(refusal({.pipe = huge, .data = 0}, 2),
            "pipeline.stages 4294967298 does not divide the job's 2 ranks");
}

TEST(ParallelLayout, OneTopologyForAnyCombinationOfAxes) {
  const ProcessTopology plain = make_topology({.pipe = 2, .data = 3});
  EXPECT_EQ(plain.axes(), (std::vector<std::string>{"pipe", "data"}));
  const ProcessTopology tensor = make_topology({.pipe = 2, .data = 2, .tensor = 2});
  EXPECT_EQ(tensor.axes(), (std::vector<std::string>{"pipe", "data", "model"}));
  EXPECT_EQ(tensor.dims(), (std::vector<int>{2, 2, 2}));
  // Context without tensor parallelism keeps a model axis of one: Megatron's tp-cp-dp-pp.
  const ProcessTopology context = make_topology({.pipe = 1, .data = 2, .context = 2});
  EXPECT_EQ(context.axes(), (std::vector<std::string>{"pipe", "data", "context", "model"}));
  EXPECT_EQ(context.dims(), (std::vector<int>{1, 2, 2, 1}));
  // The same coordinates as DeepSpeed's topology for the same axes.
  EXPECT_EQ(tensor.coord(5), pipe_model_data_parallel_topology(2, 2, 2).coord(5));
}

}  // namespace
}  // namespace pipetrain::topology
