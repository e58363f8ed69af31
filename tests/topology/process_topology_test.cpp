#include <gtest/gtest.h>

#include "pipetrain/io/errors.h"
#include "pipetrain/topology/process_topology.h"

namespace pipetrain::topology {
namespace {

using Groups = std::vector<std::vector<int>>;

TEST(ProcessTopology, CoordinatesOfA2x2x2GridMatchDeepSpeed) {
  // DeepSpeed's PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=2): axes
  // [pipe, data, model], model varying fastest.
  const ProcessTopology topo = pipe_model_data_parallel_topology(2, 2, 2);
  EXPECT_EQ(topo.world_size(), 8);
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(topo.coord(rank), (std::vector<int>{rank / 4, (rank / 2) % 2, rank % 2}));
    EXPECT_EQ(topo.rank(topo.coord(rank)), rank);
  }
  EXPECT_EQ(topo.coord(6, "pipe"), 1);
  EXPECT_EQ(topo.coord(6, "data"), 1);
  EXPECT_EQ(topo.coord(6, "model"), 0);
  EXPECT_EQ(topo.describe(5), "pipe=1 data=0 model=1");
}

TEST(ProcessTopology, AxisGroupsAreTheCommunicatorGroups) {
  const ProcessTopology topo = pipe_model_data_parallel_topology(2, 2, 2);
  EXPECT_EQ(topo.axis_groups("pipe"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(topo.axis_groups("data"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(topo.axis_groups("model"), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));

  const ProcessTopology pipe_data = pipe_data_parallel_topology(2, 3);
  EXPECT_EQ(pipe_data.axis_groups("pipe"), (Groups{{0, 3}, {1, 4}, {2, 5}}));
  EXPECT_EQ(pipe_data.axis_groups("data"), (Groups{{0, 1, 2}, {3, 4, 5}}));
}

TEST(ProcessTopology, FilterAndStageMapping) {
  const ProcessTopology topo = pipe_model_data_parallel_topology(2, 2, 2);
  EXPECT_EQ(topo.filter_ranks({{"pipe", 1}}), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(topo.filter_ranks({{"data", 0}, {"model", 1}}), (std::vector<int>{1, 5}));
  // stage_to_global: rank 3 (pipe 0, data 1, model 1) at stage 1 is rank 7.
  EXPECT_EQ(topo.rank_with(3, {{"pipe", 1}}), 7);
  EXPECT_EQ(topo.rank_with(6, {{"pipe", 0}}), 2);
}

TEST(ProcessTopology, InvalidShapesAreInputErrors) {
  EXPECT_THROW(pipe_data_parallel_topology(0, 2), io::InputError);
  EXPECT_THROW(ProcessTopology({"pipe", "pipe"}, {2, 2}), io::InputError);
  EXPECT_THROW(ProcessTopology({}, {}), io::InputError);
  const ProcessTopology topo = pipe_data_parallel_topology(2, 2);
  EXPECT_NO_THROW(topo.check_world_size(4));
  try {
    topo.check_world_size(3);
    FAIL() << "expected InputError";
  } catch (const io::InputError& e) {
    EXPECT_STREQ(e.what(), "the grid pipe 2 x data 2 needs 4 ranks, but the job has 3");
  }
  EXPECT_THROW(topo.coord(4), std::out_of_range);
  EXPECT_THROW(topo.dim("model"), std::invalid_argument);
}

}  // namespace
}  // namespace pipetrain::topology
