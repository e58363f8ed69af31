#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "pipetrain/io/errors.h"
#include "pipetrain/launch/mpirun_command.h"

namespace pipetrain::launch {
namespace {

bool contains(const std::vector<std::string>& argv, const std::string& word) {
  return std::find(argv.begin(), argv.end(), word) != argv.end();
}

TEST(MpirunCommand, SmallRootHostOversubscribedWithoutBinding) {
  ::setenv("PIPETRAIN_COMM_TIMEOUT", "30", 1);
  const auto argv =
      mpirun_command({.ranks = 4, .command = {"sh", "--flag"}, .local_cores = 2, .as_root = true});
  EXPECT_EQ(argv[0], "mpirun");
  EXPECT_EQ(argv[3], "4");
  EXPECT_TRUE(contains(argv, "--allow-run-as-root"));
  EXPECT_TRUE(contains(argv, "--oversubscribe"));
  EXPECT_TRUE(contains(argv, "--bind-to"));
  EXPECT_TRUE(contains(argv, "PIPETRAIN_COMM_TIMEOUT"));  // forwarded with -x
  EXPECT_EQ(argv[argv.size() - 2], "sh");
  EXPECT_EQ(argv.back(), "--flag");
}

TEST(MpirunCommand, BigHostNeitherOversubscribesNorUnbinds) {
  const auto argv = mpirun_command({.ranks = 8, .command = {"true"}, .local_cores = 64});
  EXPECT_FALSE(contains(argv, "--oversubscribe"));
  EXPECT_FALSE(contains(argv, "--bind-to"));
  EXPECT_FALSE(contains(argv, "--allow-run-as-root"));
}

TEST(MpirunCommand, BadInputIsAnInputError) {
  EXPECT_THROW(mpirun_command({.ranks = 0, .command = {"true"}}), io::InputError);
  EXPECT_THROW(mpirun_command({.ranks = 2, .command = {"/no/such/program"}}), io::InputError);
  EXPECT_THROW(mpirun_command({.ranks = 2}), io::InputError);
  EXPECT_THROW(mpirun_command({.ranks = 2, .hostfile = "/no/such/hostfile", .command = {"true"}}),
               io::InputError);
}

TEST(RunForwardingSignals, ReturnsTheChildsStatus) {
  EXPECT_EQ(run_forwarding_signals({"sh", "-c", "exit 3"}).status, 3);
  EXPECT_EQ(run_forwarding_signals({"sh", "-c", "kill -TERM $$"}).status, 128 + 15);
  EXPECT_EQ(run_forwarding_signals({"/no/such/program"}).status, 127);
  EXPECT_EQ(run_forwarding_signals({"true"}).signal_received, 0);
}

}  // namespace
}  // namespace pipetrain::launch
