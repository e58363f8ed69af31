#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace pipetrain {

// Per-step metrics as JSON lines and, if asked, CSV with a fixed column set. Appends when
// resuming, so one file holds the whole run; each line is flushed as written.
class MetricsLog {
 public:
  MetricsLog(const std::string& jsonl_path, const std::string& csv_path, bool append);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& record);

  static const std::vector<std::string>& csv_columns();

 private:
  std::FILE* jsonl_ = nullptr;
  std::FILE* csv_ = nullptr;
};

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

}  // namespace pipetrain
