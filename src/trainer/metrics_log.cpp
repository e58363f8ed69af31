#include "pipetrain/trainer/metrics_log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "pipetrain/errors.h"

namespace pipetrain {
namespace {

std::FILE* open_log(const std::string& path, bool append) {
  if (path.empty()) return nullptr;
  std::FILE* file = std::fopen(path.c_str(), append ? "a" : "w");
  if (!file) throw InputError("log file " + path + " cannot be written: " + std::strerror(errno));
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

}  // namespace pipetrain
