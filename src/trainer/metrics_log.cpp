#include "trainer/metrics_log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/atomic_file.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::trainer {
namespace {

// The step a line of the log records: a JSON line's "step", a CSV row's first column; -1 for
// the CSV header or a line that is neither.
int64_t step_of(const std::string& line, bool csv) {
  if (csv) {
    char* end = nullptr;
    const long long step = std::strtoll(line.c_str(), &end, 10);
    return end != line.c_str() && (*end == ',' || *end == '\0') ? step : -1;
  }
  const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  return record.is_object() && record.contains("step") && record["step"].is_number_integer()
             ? record["step"].get<int64_t>()
             : -1;
}

// Keeps the lines up to `last` step (and the CSV header), written atomically.
void cut_back(const std::string& path, int64_t last, bool csv) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return;  // none yet, or a pipe
  std::ifstream in(path);
  if (!in) return;  // nothing logged yet
  std::string kept;
  bool first = true;
  for (std::string line; std::getline(in, line); first = false) {
    const int64_t step = step_of(line, csv);
    if ((csv && first && step < 0) || (step >= 0 && step <= last)) kept += line + "\n";
  }
  io::write_file_atomically(path, kept);
}

std::FILE* open_log(const std::string& path, std::optional<int64_t> resumed_at, bool csv) {
  if (path.empty()) return nullptr;
  if (resumed_at) cut_back(path, *resumed_at, csv);
  std::FILE* file = std::fopen(path.c_str(), resumed_at ? "a" : "w");
  if (!file)
    throw io::InputError("log file " + path + " cannot be written: " + std::strerror(errno));
  return file;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& jsonl_path, const std::string& csv_path,
                       std::optional<int64_t> resumed_at)
    : jsonl_(open_log(jsonl_path, resumed_at, /*csv=*/false)),
      csv_(open_log(csv_path, resumed_at, /*csv=*/true)) {
  if (csv_ && std::ftell(csv_) == 0) {
    for (std::size_t i = 0; i < csv_columns().size(); ++i)
      std::fprintf(csv_, "%s%s", i ? "," : "", csv_columns()[i].c_str());
    std::fprintf(csv_, "\n");
    std::fflush(csv_);
  }
}

MetricsLog::~MetricsLog() {
  if (jsonl_) std::fclose(jsonl_);
  if (csv_) std::fclose(csv_);
}

const std::vector<std::string>& MetricsLog::csv_columns() {
  static const std::vector<std::string> columns = {
      "step",       "loss",          "val_loss",      "lr",          "grad_norm",
      "loss_scale", "skipped_steps", "samples_per_s", "tokens_per_s"};
  return columns;
}

void MetricsLog::write(const nlohmann::json& record) {
  if (jsonl_) {
    std::fprintf(jsonl_, "%s\n", record.dump().c_str());
    std::fflush(jsonl_);
  }
  if (csv_) {
    for (std::size_t i = 0; i < csv_columns().size(); ++i) {
      const auto& key = csv_columns()[i];
      const bool present = record.contains(key) && !record[key].is_null();
      std::fprintf(csv_, "%s%s", i ? "," : "", present ? record[key].dump().c_str() : "");
    }
    std::fprintf(csv_, "\n");
    std::fflush(csv_);
  }
}

}  // namespace pipetrain::trainer
