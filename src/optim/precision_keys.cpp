#include <string>

#include "pipetrain/config/json_value.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/optim/precision.h"

namespace pipetrain::optim {

const config::Names<Precision>& precisions() {
  static const config::Names<Precision> names{
      {"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}, {"fp16", Precision::kFp16}};
  return names;
}

const config::KeyTable<PrecisionConfig>& precision_keys() {
  static const config::KeyTable<PrecisionConfig> table = [] {
    config::KeyTable<PrecisionConfig> t;
    // bf16.enabled and fp16.enabled both set the model's precision.

    auto enabled = [&t](const char* name, Precision precision, const char* help) {
      t.custom(
          name, "bool", help,
          [precision](const std::string& key, const nlohmann::json& v, PrecisionConfig& c) {
            if (!config::read_bool(key, v)) return;
            if (c.dtype != Precision::kFp32)
              throw io::InputError("bf16.enabled and fp16.enabled exclude each other; enable one");
            c.dtype = precision;
          },
          [precision](const PrecisionConfig& c) { return nlohmann::json(c.dtype == precision); });
    };
    enabled("bf16.enabled", Precision::kBf16, "model and transfers in bfloat16, fp32 masters");
    enabled("fp16.enabled", Precision::kFp16,
            "model and transfers in float16, fp32 masters, loss scaling");
    t.number("fp16.loss_scale", PIPETRAIN_FIELD(loss_scaler.loss_scale),
             "0: dynamic; > 0: this static scale", config::at_least(0))
        .integer("fp16.initial_scale_power", PIPETRAIN_FIELD(loss_scaler.initial_scale_power),
                 "dynamic scaling starts at 2^this", config::within(0, 60))
        .integer("fp16.loss_scale_window", PIPETRAIN_FIELD(loss_scaler.window),
                 "clean steps before the scale doubles", config::at_least(1))
        .integer("fp16.hysteresis", PIPETRAIN_FIELD(loss_scaler.hysteresis),
                 "overflows before the scale halves", config::at_least(1))
        .number("fp16.min_loss_scale", PIPETRAIN_FIELD(loss_scaler.min_loss_scale),
                "the scale never falls below this", config::above(0))
        .custom(
            "communication_data_type", "string",
            "data-parallel gradient reduction (all-reduce, ZeRO's reduce-scatter) in `fp32` or the "
            "model's type",
            [](const std::string& key, const nlohmann::json& v, PrecisionConfig& c) {
              const std::string text = config::read_string(key, v);
              const std::string& model = config::name_of(precisions(), c.dtype);
              if (text != "fp32" && text != model) {
                throw io::InputError("communication_data_type must be \"fp32\" or the model's \"" +
                                     model + "\", got \"" + text + "\"");
              }
              c.communication_dtype = text == "fp32" ? Precision::kFp32 : c.dtype;
            },
            [](const PrecisionConfig& c) {
              return nlohmann::json(config::name_of(precisions(), c.communication_dtype));
            });
    return t;
  }();
  return table;
}

}  // namespace pipetrain::optim
