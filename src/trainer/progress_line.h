#pragma once

#include <cstdint>
#include <string>

namespace pipetrain::trainer {

// A progress line on rank 0: updated in place on a terminal, a plain line every
// `every` steps otherwise.
class ProgressLine {
 public:
  ProgressLine(int64_t total_steps, int64_t every);
  void update(int64_t step, double loss, double lr, double samples_per_s, double tokens_per_s,
              double seconds_per_step, const std::string& extra = "");
  void message(const std::string& text);  // a line of its own, keeping the progress line
  void finish();

 private:
  int64_t total_;
  int64_t every_;
  bool terminal_;
  bool pending_ = false;
};

}  // namespace pipetrain::trainer
