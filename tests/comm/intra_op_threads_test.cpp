#include <gtest/gtest.h>

#include <cstdlib>

#include "pipetrain/comm/rank_main.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::comm {
namespace {

class IntraOpThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("PIPETRAIN_THREADS");
    ::unsetenv("OMP_NUM_THREADS");
  }
  void TearDown() override { SetUp(); }
};

TEST_F(IntraOpThreads, SharesTheCoresAmongLocalRanks) {
  EXPECT_EQ(intra_op_threads(16, 4), 4);
  EXPECT_EQ(intra_op_threads(2, 4), 1);  // oversubscribed: never below one
  EXPECT_EQ(intra_op_threads(8, 3), 2);
}

TEST_F(IntraOpThreads, ExplicitSettingsWin) {
  ::setenv("OMP_NUM_THREADS", "3", 1);
  EXPECT_EQ(intra_op_threads(16, 4), 3);
  ::setenv("PIPETRAIN_THREADS", "5", 1);
  EXPECT_EQ(intra_op_threads(16, 4), 5);
  ::setenv("PIPETRAIN_THREADS", "lots", 1);
  EXPECT_THROW(intra_op_threads(16, 4), io::InputError);
}

}  // namespace
}  // namespace pipetrain::comm
