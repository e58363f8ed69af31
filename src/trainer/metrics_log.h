#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace pipetrain::trainer {

// Per-step metrics as JSON lines and, if asked, CSV with a fixed column set; each line is
// flushed as written. Resuming at step `resumed_at`, the files are first cut back to the
// steps up to it (a run stopped after its last save wrote steps the resumed run repeats),
// then appended to, so one file holds the whole run once.
class MetricsLog {
 public:
  MetricsLog(const std::string& jsonl_path, const std::string& csv_path,
             std::optional<int64_t> resumed_at);
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
