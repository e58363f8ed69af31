#include "pipetrain/comm/deadline.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "io/rank_record.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::comm {
namespace {

std::string& identity_storage() {
  static std::string identity = "rank ?";
  return identity;
}

const WaitContext*& current_context() {
  // Per thread: autograd's device thread starts collectives while the engine's thread
  // updates its own context.
  static thread_local const WaitContext* context = nullptr;
  return context;
}

}  // namespace

Seconds default_timeout() {
  const char* text = std::getenv("PIPETRAIN_COMM_TIMEOUT");
  if (!text || !*text) return Seconds(300);
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (*end != '\0' || !(seconds > 0)) {
    throw io::InputError("PIPETRAIN_COMM_TIMEOUT must be a positive number of seconds, got '" +
                         std::string(text) + "'");
  }
  return Seconds(seconds);
}

void set_rank_identity(std::string identity) {
  io::describe_rank(identity);
  identity_storage() = std::move(identity);
}
const std::string& rank_identity() {
  return identity_storage();
}

ScopedWaitContext::ScopedWaitContext(const WaitContext& context)
    : previous_(std::exchange(current_context(), &context)) {}

ScopedWaitContext::ScopedWaitContext(std::string text)
    : text_(), previous_(std::exchange(current_context(), &text_)) {
  text_.text = std::move(text);
}

ScopedWaitContext::~ScopedWaitContext() {
  current_context() = previous_;
}

std::string wait_context() {
  return current_context() ? current_context()->describe() : std::string();
}

namespace {

std::atomic<int64_t>& longest_poll_sleep_us() {
  static std::atomic<int64_t> us{100};
  return us;
}

}  // namespace

std::chrono::microseconds longest_poll_sleep() {
  return std::chrono::microseconds(longest_poll_sleep_us().load(std::memory_order_relaxed));
}

void set_longest_poll_sleep(std::chrono::microseconds pause) {
  longest_poll_sleep_us().store(pause.count(), std::memory_order_relaxed);
}

void wait_with_deadline(const std::function<bool()>& done, const std::function<std::string()>& what,
                        Seconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // Large MPI transfers only progress while a rank polls, so a rank keeps polling (and
  // yielding the core to others) for a while before it starts to sleep between polls.
  constexpr auto kSpin = std::chrono::microseconds(50);
  constexpr auto kYield = std::chrono::milliseconds(50);
  const auto longest = longest_poll_sleep();
  auto sleep = std::min(std::chrono::microseconds(50), longest);
  while (!done()) {
    const auto waited = Clock::now() - start;
    if (waited >= timeout) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.1f", Seconds(waited).count());
      std::string message = std::string("waited ") + seconds + " s for " + what();
      if (const std::string context = wait_context(); !context.empty())
        message += " [" + context + "]";
      message += ": deadline exceeded";
      throw DeadlineExceeded(message);
    }
    if (waited < kSpin) continue;
    if (waited < kYield) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, longest);
  }
}

}  // namespace pipetrain::comm
