#include "pipetrain/optim/optimizer_settings.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "pipetrain/config/config_section.h"
#include "pipetrain/config/unknown_keys.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::optim {
namespace {

// Typed reader over a params object that rejects keys it was not asked about.
class Params {
 public:
  Params(const nlohmann::json& json, const std::string& path) : section_(json, path) {}
  double number(const std::string& key, double fallback) {
    used_.push_back(key);
    return section_.get_double(key, fallback);
  }
  std::string text(const std::string& key, const std::string& fallback) {
    used_.push_back(key);
    return section_.get_string(key, fallback);
  }
  std::pair<double, double> pair(const std::string& key, std::pair<double, double> fallback) {
    used_.push_back(key);
    const auto numbers = section_.get_numbers(key, {fallback.first, fallback.second});
    if (numbers.size() != 2)
      throw io::InputError(section_.path() + "." + key + " must hold two numbers");
    return {numbers[0], numbers[1]};
  }
  void finish() const {
    std::vector<std::string> known;
    for (const auto& key : used_) known.push_back(section_.path() + "." + key);
    config::refuse_unknown_keys(section_.unknown_keys(used_), known);
  }

 private:
  config::ConfigSection section_;
  std::vector<std::string> used_;
};

void check_positive(double value, const std::string& key) {
  if (!(value > 0)) throw io::InputError(key + " must be > 0, got " + std::to_string(value));
}

// 0 <= value <= max (or < max).
void check_within(double value, double max, bool exclusive, const std::string& key) {
  if (!(value >= 0) || value > max || (exclusive && value == max)) {
    throw io::InputError(key + " must be in [0, " + std::to_string(static_cast<int>(max)) +
                         (exclusive ? ")" : "]") + ", got " + std::to_string(value));
  }
}

double warmup_gamma(int64_t step, int64_t warmup_steps, bool log_warmup) {
  if (step >= warmup_steps) return 1.0;
  if (log_warmup)
    return std::log(static_cast<double>(step + 1)) / std::log(static_cast<double>(warmup_steps));
  return static_cast<double>(step) / warmup_steps;
}

}  // namespace

int state_elements_per_parameter(const OptimizerConfig& config) {
  return config.type == "SGD" ? 1 : 2;
}

double base_learning_rate(const OptimizerConfig& config) {
  return config::ConfigSection(config.params, "optimizer.params").get_double("lr", 1e-3);
}

OptimizerSettings read_optimizer_settings(const OptimizerConfig& config) {
  Params p(config.params, "optimizer.params");
  OptimizerSettings s;
  s.lr = p.number("lr", s.lr);
  check_positive(s.lr, "optimizer.params.lr");
  s.weight_decay = p.number("weight_decay", config.type == "AdamW" ? 0.01 : 0.0);
  if (!(s.weight_decay >= 0)) {
    throw io::InputError("optimizer.params.weight_decay must be >= 0, got " +
                         std::to_string(s.weight_decay));
  }
  if (config.type == "SGD") {
    s.momentum = p.number("momentum", s.momentum);
    check_within(s.momentum, 1, false, "optimizer.params.momentum");
  } else {
    std::tie(s.beta1, s.beta2) = p.pair("betas", {s.beta1, s.beta2});
    check_within(s.beta1, 1, true, "optimizer.params.betas[0]");
    check_within(s.beta2, 1, true, "optimizer.params.betas[1]");
    s.eps = p.number("eps", s.eps);
    check_positive(s.eps, "optimizer.params.eps");
  }
  p.finish();
  return s;
}

LrSchedule make_lr_schedule(const SchedulerConfig& config, double base_lr) {
  if (config.type.empty()) return [base_lr](int64_t) { return base_lr; };
  Params p(config.params, "scheduler.params");
  const int64_t warmup = static_cast<int64_t>(p.number("warmup_num_steps", 1000));
  const std::string warmup_type = p.text("warmup_type", "log");
  if (warmup_type != "log" && warmup_type != "linear") {
    throw io::InputError("scheduler.params.warmup_type must be \"log\" or \"linear\", got \"" +
                         warmup_type + "\"");
  }
  if (warmup < 1) throw io::InputError("scheduler.params.warmup_num_steps must be at least 1");
  const bool log_warmup = warmup_type == "log";
  LrSchedule schedule;
  if (config.type == "WarmupCosineLR") {
    const int64_t total = static_cast<int64_t>(p.number("total_num_steps", 0));
    const double min_ratio = p.number("warmup_min_ratio", 0.0);
    const double cos_min_ratio = p.number("cos_min_ratio", 0.0001);
    if (total <= warmup)
      throw io::InputError("scheduler.params.total_num_steps must exceed warmup_num_steps");
    schedule = [=](int64_t step) {
      if (step < warmup)
        return base_lr * (min_ratio + (1.0 - min_ratio) * warmup_gamma(step, warmup, log_warmup));
      const double progress = std::min(1.0, static_cast<double>(step - warmup) / (total - warmup));
      return base_lr *
             (cos_min_ratio + (1.0 - cos_min_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress)));
    };
  } else {
    const double min_lr = p.number("warmup_min_lr", 0.0);
    const double max_lr = p.number("warmup_max_lr", base_lr);
    const int64_t total =
        config.type == "WarmupDecayLR" ? static_cast<int64_t>(p.number("total_num_steps", 0)) : 0;
    if (config.type == "WarmupDecayLR" && total <= warmup) {
      throw io::InputError("scheduler.params.total_num_steps must exceed warmup_num_steps");
    }
    schedule = [=](int64_t step) {
      double gamma = warmup_gamma(step, warmup, log_warmup);
      if (total > 0 && step >= warmup) {
        gamma =
            std::max(0.0, static_cast<double>(total - step) / std::max<int64_t>(1, total - warmup));
      }
      return min_lr + (max_lr - min_lr) * gamma;
    };
  }
  p.finish();
  return schedule;
}

}  // namespace pipetrain::optim
