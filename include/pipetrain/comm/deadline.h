#pragma once

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

// Every blocking wait in pipetrain has a deadline; a wait that expires says what it
// waited for, in which engine context and for how long (run_rank adds who waited),
// instead of hanging the job.
namespace pipetrain::comm {

using Seconds = std::chrono::duration<double>;

// PIPETRAIN_COMM_TIMEOUT (seconds) if set, else 300 s. Throws InputError if malformed.
Seconds default_timeout();

class DeadlineExceeded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Who this process is, e.g. "rank 3 (pipe=1 data=1)"; set once the topology is known.
void set_rank_identity(std::string identity);
const std::string& rank_identity();

// What the caller is doing, e.g. "stage 1, step 4, RecvGrad buffer 0, micro-batch 3",
// formatted only when a wait fails (the engine updates it for every instruction).
class WaitContext {
 public:
  virtual ~WaitContext() = default;
  virtual std::string describe() const = 0;
};

// Makes `context` current for the scope on this thread; nested scopes restore the outer one.
class ScopedWaitContext {
 public:
  explicit ScopedWaitContext(const WaitContext& context);
  explicit ScopedWaitContext(std::string text);  // a fixed description
  ~ScopedWaitContext();
  ScopedWaitContext(const ScopedWaitContext&) = delete;
  ScopedWaitContext& operator=(const ScopedWaitContext&) = delete;

 private:
  struct Text : WaitContext {
    std::string text;
    std::string describe() const override { return text; }
  } text_;
  const WaitContext* previous_;
};
// The current context's description; empty when there is none.
std::string wait_context();

// Calls `done` until it returns true: spinning briefly, then yielding (up to 50 ms), then
// sleeping with growing pauses (up to longest_poll_sleep()) so waiting ranks leave the cores
// to others. Throws DeadlineExceeded describing the wait (`what()` is called only then)
// once `timeout` has passed.
// The longest pause between two polls of a long wait: 100 µs unless set (for studies; see
// bench/p2p_bench). A large MPI transfer moves only while both ends poll, so a longer pause
// slows a transfer whose other end arrives late; a shorter one costs the waiting rank CPU.
std::chrono::microseconds longest_poll_sleep();
void set_longest_poll_sleep(std::chrono::microseconds pause);

void wait_with_deadline(const std::function<bool()>& done, const std::function<std::string()>& what,
                        Seconds timeout);

}  // namespace pipetrain::comm
