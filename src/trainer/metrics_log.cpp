#include "pipetrain/trainer/metrics_log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "pipetrain/io/errors.h"

namespace pipetrain::trainer {
namespace {

std::FILE* open_log(const std::string& path, bool append) {
  if (path.empty()) return nullptr;
  std::FILE* file = std::fopen(path.c_str(), append ? "a" : "w");
  if (!file)
    throw io::InputError("log file " + path + " cannot be written: " + std::strerror(errno));
  return file;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& jsonl_path, const std::string& csv_path, bool append)
    : jsonl_(open_log(jsonl_path, append)), csv_(open_log(csv_path, append)) {
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
