#include "gpt_ops.h"

#include <ATen/ATen.h>

#include "pipetrain/models/gpt/gpt.h"
#include "pipetrain/module/pipeline_module.h"

namespace pipetrain::testing {

std::map<std::string, std::vector<RecordedOp>> gpt_step_ops(int layers, const GptOpsShape& s) {
  const models::GptConfig config{.vocab_size = s.vocab,
                                 .context = s.context,
                                 .d_model = s.d_model,
                                 .heads = s.heads,
                                 .layers = layers};
  module::PipelineModule model(models::gpt_layers(config), models::gpt_loss(), {});
  model.to(at::kBFloat16);
  const at::Tensor ids = at::randint(s.vocab, {s.batch, s.context}, at::kLong);
  const at::Tensor labels = at::randint(s.vocab, {s.batch, s.context}, at::kLong);
  constexpr int kMicroBatches = 2;  // the scale 1 / M of the plain loop's loss

  std::map<std::string, std::vector<RecordedOp>> phases;
  module::Activation outputs;
  at::Tensor loss;
  phases["forward"] = record_ops([&] { outputs = model.forward({ids}); });
  phases["loss"] = record_ops([&] {
    for (auto& t : outputs) t = t.to(at::kFloat);
    loss = model.loss(outputs, {labels});
  });
  phases["backward"] = record_ops([&] { (loss / kMicroBatches).backward(); });
  return phases;
}

}  // namespace pipetrain::testing
