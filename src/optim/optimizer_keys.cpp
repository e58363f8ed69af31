#include <cctype>
#include <string>

#include "pipetrain/config/json_value.h"
#include "pipetrain/optim/optimizer_config.h"

namespace pipetrain::optim {
namespace {

const config::Names<std::string>& scheduler_types() {
  static const config::Names<std::string> names =
      config::spellings({"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"});
  return names;
}

}  // namespace

const config::KeyTable<OptimizerConfig>& optimizer_keys() {
  static const config::KeyTable<OptimizerConfig> table = [] {
    config::KeyTable<OptimizerConfig> t;
    t.custom(
         "optimizer.type", "one of `Adam` `AdamW` `SGD`",
         "LibTorch's optimizer; any letter case, as DeepSpeed reads it",
         [](const std::string& key, const nlohmann::json& v, OptimizerConfig& c) {
           static const config::Names<std::string> names =
               config::spellings({"Adam", "AdamW", "SGD"});
           auto lower = [](std::string s) {
             for (char& ch : s)
               ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
             return s;
           };
           const std::string text = lower(config::read_string(key, v));
           for (const auto& [name, value] : names) {
             if (lower(name) == text) {
               c.type = value;
               return;
             }
           }
           config::read_choice(key, v, names, config::Quoting::kBare);  // throws, listing the names
         },
         [](const OptimizerConfig& c) { return nlohmann::json(c.type); })
        .object("optimizer.params", PIPETRAIN_FIELD(params),
                "`lr` (default 0.001), `betas` [b1, b2], `eps`, `weight_decay` (AdamW default "
                "0.01), `momentum` (SGD)");
    return t;
  }();
  return table;
}

const config::KeyTable<SchedulerConfig>& scheduler_keys() {
  static const config::KeyTable<SchedulerConfig> table = [] {
    config::KeyTable<SchedulerConfig> t;
    t.custom(
         "scheduler.type", "one of `WarmupLR` `WarmupDecayLR` `WarmupCosineLR`",
         "learning-rate schedule; none (or empty): constant",
         [](const std::string& key, const nlohmann::json& v, SchedulerConfig& c) {
           const std::string text = config::read_string(key, v);
           c.type = text.empty()
                        ? text
                        : config::read_choice(key, v, scheduler_types(), config::Quoting::kBare);
         },
         [](const SchedulerConfig& c) {
           return c.type.empty() ? nlohmann::json() : nlohmann::json(c.type);
         })
        .object("scheduler.params", PIPETRAIN_FIELD(params),
                "DeepSpeed's names: `warmup_min_lr`, `warmup_max_lr`, `warmup_num_steps`, "
                "`warmup_type` (`log`/`linear`), `total_num_steps`, `warmup_min_ratio`, "
                "`cos_min_ratio`");
    return t;
  }();
  return table;
}

}  // namespace pipetrain::optim
