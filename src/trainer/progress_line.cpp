#include "trainer/progress_line.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace pipetrain::trainer {
namespace {

// Under mpirun a rank's stdout is a pseudo-terminal whatever the user's is, so
// `pipetrain launch` passes its own answer down in PIPETRAIN_TERMINAL.
bool on_terminal() {
  if (const char* told = std::getenv("PIPETRAIN_TERMINAL")) return std::string(told) == "1";
  return ::isatty(::fileno(stdout)) == 1;
}

}  // namespace

ProgressLine::ProgressLine(int64_t total_steps, int64_t every)
    : total_(total_steps), every_(every), terminal_(on_terminal()) {}

void ProgressLine::update(int64_t step, double loss, double lr, double samples_per_s,
                          double tokens_per_s, double seconds_per_step, const std::string& extra) {
  if (!terminal_ && step % every_ != 0 && step != total_) return;
  const double eta = seconds_per_step * static_cast<double>(total_ - step);
  std::printf("%sstep %lld/%lld loss %.4f lr %.3g %.1f samples/s %.0f tokens/s%s ETA %02d:%02d%s",
              terminal_ ? "\r\033[K" : "", static_cast<long long>(step),
              static_cast<long long>(total_), loss, lr, samples_per_s, tokens_per_s, extra.c_str(),
              static_cast<int>(eta) / 60, static_cast<int>(eta) % 60, terminal_ ? "" : "\n");
  pending_ = terminal_;
  std::fflush(stdout);
}

void ProgressLine::message(const std::string& text) {
  if (pending_) std::printf("\n");
  pending_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void ProgressLine::finish() {
  if (pending_) std::printf("\n");
  pending_ = false;
  std::fflush(stdout);
}

}  // namespace pipetrain::trainer
