// The built-in GPT issues no more operators per block than it does today, which is what
// PyTorch eager issues for the same block (tests/models/gpt_op_lists.py compares the lists
// themselves): an added cast, copy or autograd node fails here.
#include <gtest/gtest.h>

#include <string>

#include "gpt_ops.h"

namespace pipetrain::testing {
namespace {

// Operators and autograd nodes of a phase.
int64_t count(const std::map<std::string, std::vector<RecordedOp>>& phases,
              const std::string& phase) {
  return static_cast<int64_t>(phases.at(phase).size());
}

// Eager PyTorch's counts for bench/gpu_eager.py's GPT at gpt_ops.h's shapes (operators with
// work, views and autograd nodes together; gpt_op_lists.py prints them apart).
constexpr int64_t kBlockForward = 10 + 5;
constexpr int64_t kBlockBackward = 20 + 43 + 39;
constexpr int64_t kLoss = 2 + 2;
constexpr int64_t kModelForward = 26 + 11;        // two blocks
constexpr int64_t kModelBackward = 53 + 98 + 95;  // two blocks

TEST(GptOps, PerBlockAndWholeModelCountsDoNotGrow) {
  const auto one = gpt_step_ops(1), two = gpt_step_ops(2);
  EXPECT_LE(count(two, "forward") - count(one, "forward"), kBlockForward);
  EXPECT_LE(count(two, "backward") - count(one, "backward"), kBlockBackward);
  EXPECT_LE(count(two, "loss"), kLoss);
  EXPECT_LE(count(two, "forward"), kModelForward);
  EXPECT_LE(count(two, "backward"), kModelBackward);
}

}  // namespace
}  // namespace pipetrain::testing
