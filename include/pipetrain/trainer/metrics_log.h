#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace pipetrain::trainer {

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

}  // namespace pipetrain::trainer
