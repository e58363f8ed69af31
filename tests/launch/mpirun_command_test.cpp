#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "launch/mpirun_command.h"
#include "launch/signal_filter.h"
#include "pipetrain/io/errors.h"

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

// A stop signal the child passes back (as the filter loaded into mpirun does) is taken as
// one sent to the launcher: noted, and passed on as SIGUSR2.
TEST(RunForwardingSignals, TakesAStopSignalTheChildPassesBack) {
  const ChildEnding ending = run_forwarding_signals(
      {"sh", "-c", "trap 'exit 7' USR2; kill -TERM $PPID; sleep 5 & wait; exit 1"});
  EXPECT_EQ(ending.status, 7);
  EXPECT_EQ(ending.signal_received, SIGTERM);
}

// A signal to every process of a job reaches the launcher twice, directly and through
// mpirun: one request, not the second SIGINT that stops the job at once. Two from outside
// are two. (Apart by 0.3 s: two signals pending at once are one anyway.)
TEST(RunForwardingSignals, CountsASignalPassedBackAndTheSameFromOutsideAsOne) {
  auto run = [](const std::string& second_sender) {
    return run_forwarding_signals(
        {"sh", "-c",
         "trap 'echo usr2' USR2; trap 'exit 9' INT; kill -INT $PPID; sleep 0.3; " + second_sender +
             " -INT $PPID; sleep 1; exit 7"});
  };
  const ChildEnding once = run("/bin/kill");  // through the child, then from outside
  EXPECT_EQ(once.status, 7);
  EXPECT_EQ(once.signal_received, SIGINT);
  const ChildEnding twice = run("kill");  // through the child twice: two requests
  EXPECT_EQ(twice.status, 9);
}

TEST(SignalFilter, GoesFirstInLdPreload) {
  EXPECT_EQ(with_preload({"A=1"}, "/lib/f.so"),
            (std::vector<std::string>{"A=1", "LD_PRELOAD=/lib/f.so"}));
  EXPECT_EQ(with_preload({"LD_PRELOAD=/u.so", "B=2"}, "/lib/f.so"),
            (std::vector<std::string>{"LD_PRELOAD=/lib/f.so:/u.so", "B=2"}));
  EXPECT_EQ(with_preload({"LD_PRELOAD=/u.so"}, ""), (std::vector<std::string>{"LD_PRELOAD=/u.so"}));
}

}  // namespace
}  // namespace pipetrain::launch
