// A failed job tears down nothing that needs its peers, and its deadlines hold for work the
// host does not wait for: the teardown rule and the watchdog, without MPI or a GPU.
#include "comm/job_failure.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "comm/watchdog.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::comm {
namespace {

using namespace std::chrono_literals;

TEST(PeerTeardown, DestroysOnACleanRelease) {
  const int destroyed = PeerTeardown::destroyed();
  int calls = 0;
  {
    PeerTeardown teardown([&] { ++calls; });
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(PeerTeardown::destroyed(), destroyed + 1);
}

TEST(PeerTeardown, LeavesTheCommunicatorAloneWhileAnExceptionUnwinds) {
  const int left = PeerTeardown::left();
  int calls = 0;
  try {
    PeerTeardown teardown([&] { ++calls; });
    throw std::runtime_error("a peer is gone");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(PeerTeardown::left(), left + 1);
  EXPECT_FALSE(job_failed());  // unwinding alone does not fail the job
}

TEST(PeerTeardown, EndsOnceWhateverCallsIt) {
  int calls = 0;
  {
    PeerTeardown teardown([&] { ++calls; });
    teardown.end();
    teardown.end();
  }
  EXPECT_EQ(calls, 1);
}

// Last in this file: the failure is for the rest of the process.
TEST(PeerTeardown, LeavesEveryCommunicatorAloneOnceTheJobFailed) {
  PeerTeardown before([] {});
  mark_job_failed("waited 1.0 s for NCCL all_reduce: deadline exceeded");
  mark_job_failed("a second reason");
  EXPECT_TRUE(job_failed());
  EXPECT_EQ(job_failure_reason(), "waited 1.0 s for NCCL all_reduce: deadline exceeded");
  EXPECT_FALSE(collective_teardown_allowed());
  int calls = 0;
  {
    PeerTeardown teardown([&] { ++calls; });
  }
  before.end();
  EXPECT_EQ(calls, 0);
}

TEST(EndJob, PrintsOneLineAndExitsWithTheCodeWithoutMpi) {
  EXPECT_EXIT(end_job("waited 2.0 s for NCCL recv from rank 1: deadline exceeded", 3),
              ::testing::ExitedWithCode(3),
              "^pipetrain: rank \\?: waited 2.0 s for NCCL recv from rank 1: deadline exceeded\n$");
}

// A failure before MPI started (start_rank's MPI_Init_thread failed) ends this process alone,
// in the same one line, without calling MPI.
TEST(FailRank, EndsThisProcessAloneBeforeMpiStarts) {
  EXPECT_EXIT(fail_rank(io::InputError("PIPETRAIN_THREADS must be a positive integer")),
              ::testing::ExitedWithCode(2),
              "^pipetrain: rank \\?: PIPETRAIN_THREADS must be a positive integer\n$");
  EXPECT_EXIT(fail_rank(std::runtime_error("MPI_Init_thread failed")), ::testing::ExitedWithCode(1),
              "^pipetrain: rank \\?: .*MPI_Init_thread failed\n$");
}

// Collects the watchdog's failures.
struct Failures {
  std::mutex mutex;
  std::vector<std::string> messages;
  Watchdog::Failure recorder() {
    return [this](const std::string& message) {
      const std::lock_guard lock(mutex);
      messages.push_back(message);
    };
  }
  std::vector<std::string> seen() {
    const std::lock_guard lock(mutex);
    return messages;
  }
};

TEST(Watchdog, EndsWorkPastItsDeadlineWithOneLineNamingIt) {
  Failures failures;
  std::atomic<bool> finished{false};  // before the watchdog, which polls it until destroyed
  Watchdog watchdog(failures.recorder(), 1ms);
  watchdog.watch({.what = "NCCL all_reduce over 2 ranks (0, 1)",
                  .context = "stage 0, step 3, ReduceGrads",
                  .done = [&] { return finished.load(); },
                  .error = nullptr,
                  .timeout = Seconds(0.05)});
  watchdog.drain();  // returns once the watchdog failed
  ASSERT_TRUE(watchdog.failed());
  const auto seen = failures.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].rfind("waited 0.", 0), 0u) << seen[0];
  EXPECT_NE(seen[0].find(" s for NCCL all_reduce over 2 ranks (0, 1) [stage 0, step 3, "
                         "ReduceGrads]: deadline exceeded"),
            std::string::npos)
      << seen[0];
}

TEST(Watchdog, ReportsAnErrorBeforeTheDeadline) {
  Failures failures;
  Watchdog watchdog(failures.recorder(), 1ms);
  watchdog.watch({.what = "NCCL broadcast from rank 0",
                  .context = "",
                  .done = [] { return false; },
                  .error = [] { return std::string("NCCL error: remote process exited"); },
                  .timeout = Seconds(300)});
  watchdog.drain();
  const auto seen = failures.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], "NCCL broadcast from rank 0 failed: NCCL error: remote process exited");
}

TEST(Watchdog, TurnsAnExceptionWhilePollingIntoTheOperationsFailure) {
  Failures failures;
  Watchdog watchdog(failures.recorder(), 1ms);
  watchdog.watch({.what = "NCCL send to rank 1 (tag 3)",
                  .context = "",
                  .done = []() -> bool {
                    throw std::runtime_error("cudaEventQuery: an illegal memory access");
                  },
                  .error = nullptr,
                  .timeout = Seconds(300)});
  watchdog.drain();
  const auto seen = failures.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0],
            "NCCL send to rank 1 (tag 3) failed: cudaEventQuery: an illegal memory access");
}

TEST(Watchdog, ForgetsWorkThatCompletedFromManyThreads) {
  Failures failures;
  std::atomic<int> polls{0};  // before the watchdog, which polls it until destroyed
  Watchdog watchdog(failures.recorder(), 100us);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int k = 0; k < 50; ++k) {
        auto left = std::make_shared<std::atomic<int>>(3);  // done on its third poll
        watchdog.watch({.what = "op",
                        .context = "",
                        .done =
                            [left, &polls] {
                              ++polls;
                              return --*left <= 0;
                            },
                        .error = nullptr,
                        .timeout = Seconds(60)});
      }
    });
  }
  for (auto& thread : threads) thread.join();
  watchdog.drain();
  EXPECT_EQ(watchdog.watched(), 0u);
  EXPECT_FALSE(watchdog.failed());
  EXPECT_TRUE(failures.seen().empty());
  EXPECT_GE(polls.load(), 600);
}

}  // namespace
}  // namespace pipetrain::comm
