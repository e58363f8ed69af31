#include "launch/job_ending.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

namespace pipetrain::launch {
namespace {

using How = io::RankEnding::How;

io::RankEnding rank(int r, How how, int code = 0, int64_t when = 0) {
  return {.rank = r,
          .host = "h",
          .pid = 100 + r,
          .identity = "rank " + std::to_string(r) + " (pipe=" + std::to_string(r / 2) + ")",
          .how = how,
          .code = code,
          .when_ns = when};
}

// describe_ending for a job of as many ranks as there are accounts.
std::string ending_of(const std::vector<io::RankEnding>& ranks, int status) {
  return describe_ending(ranks, static_cast<int>(ranks.size()), status);
}

TEST(DescribeEnding, SaysNothingWhenTheJobSucceededOrARankSpoke) {
  EXPECT_EQ(ending_of({rank(0, How::kExited, 0)}, 0), "");
  // Rank 1 printed its error and aborted; mpirun then ended rank 0 (SIGTERM, SIGKILL).
  EXPECT_EQ(ending_of({rank(0, How::kSignalled, SIGTERM, 5), rank(1, How::kExited, 2)}, 2), "");
  EXPECT_EQ(ending_of({rank(0, How::kUnknown), rank(1, How::kExited, 1)}, 137), "");
}

TEST(DescribeEnding, NamesARankKilledFromOutside) {
  // Rank 2 was SIGKILLed; mpirun then sent the others SIGTERM.
  EXPECT_EQ(ending_of({rank(0, How::kSignalled, SIGTERM, 9), rank(1, How::kSignalled, SIGTERM, 8),
                       rank(2, How::kUnknown), rank(3, How::kSignalled, SIGTERM, 7)},
                      137),
            "pipetrain: launch: rank 2 (pipe=1), pid 102 on h, was killed by SIGKILL from outside "
            "the job (a kill, or the kernel's out-of-memory killer)");
  EXPECT_EQ(
      ending_of({rank(0, How::kExited, 0), rank(1, How::kUnknown)}, 4),
      "pipetrain: launch: rank 1 (pipe=0), pid 101 on h, ended without a word (exit status 4)");
}

TEST(DescribeEnding, NamesACrashBeforeTheStopsItCaused) {
  EXPECT_EQ(
      ending_of({rank(0, How::kSignalled, SIGTERM, 1), rank(1, How::kSignalled, SIGSEGV, 2)}, 139),
      "pipetrain: launch: rank 1 (pipe=0), pid 101 on h, died of SIGSEGV");
}

TEST(DescribeEnding, NamesTheFirstRankStoppedFromOutside) {
  EXPECT_EQ(
      ending_of({rank(0, How::kSignalled, SIGTERM, 20), rank(1, How::kSignalled, SIGINT, 10)}, 130),
      "pipetrain: launch: rank 1 (pipe=0), pid 101 on h, was stopped by SIGINT from outside "
      "the job");
  // Rank 2 on another host died; the local ranks only saw mpirun's SIGTERM.
  EXPECT_EQ(
      describe_ending({rank(0, How::kSignalled, SIGTERM, 1), rank(1, How::kSignalled, SIGTERM, 2)},
                      4, 137),
      "pipetrain: launch: the job ended with status 137; 2 of 4 ranks left no account on "
      "this host (other hosts?)");
  EXPECT_EQ(describe_ending({}, 2, 2), "");  // e.g. a bad command line before any account
}

TEST(DescribeEnding, NamesASilentCrashWithoutBlamingOutsiders) {
  EXPECT_EQ(ending_of({rank(0, How::kExited, 0), rank(1, How::kUnknown)}, 139),
            "pipetrain: launch: rank 1 (pipe=0), pid 101 on h, died of SIGSEGV without a word");
}

// A rank's account as the launcher reads it back, through the files the ranks write.
TEST(RankRecord, RoundTripsThroughItsFolder) {
  const auto folder =
      std::filesystem::temp_directory_path() / ("rank-record-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  ::setenv("PIPETRAIN_RANK_RECORDS", folder.c_str(), 1);
  io::open_rank_record(3);
  auto read = io::read_rank_records(folder);
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].rank, 3);
  EXPECT_EQ(read[0].pid, ::getpid());
  EXPECT_EQ(read[0].identity, "rank 3");
  EXPECT_EQ(read[0].how, How::kUnknown);
  io::describe_rank("rank 3 (pipe=1 data=1)");
  io::record_signal(SIGTERM);
  read = io::read_rank_records(folder);
  EXPECT_EQ(read[0].identity, "rank 3 (pipe=1 data=1)");
  EXPECT_EQ(read[0].how, How::kSignalled);
  EXPECT_EQ(read[0].code, SIGTERM);
  EXPECT_GT(read[0].when_ns, 0);
  io::record_exit(75);
  read = io::read_rank_records(folder);
  EXPECT_EQ(read[0].how, How::kExited);
  EXPECT_EQ(read[0].code, 75);
  ::unsetenv("PIPETRAIN_RANK_RECORDS");
  std::filesystem::remove_all(folder);
}

}  // namespace
}  // namespace pipetrain::launch
