#pragma once

#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "pipetrain/expert_parallel/all_to_all.h"
#include "pipetrain/models/gpt/gpt.h"
#include "pipetrain/models/mlp/mlp.h"
#include "pipetrain/models/model_config.h"

namespace pipetrain::models {

// What a model reads, so that a trainer can feed it without knowing its name: token ids
// [batch, context] with the next tokens as labels (a language model, which can also
// generate text), or feature vectors [batch, inputs] with targets [batch, outputs].
struct TokenInput {
  int64_t vocab_size = 0;
  int64_t context = 0;
};
struct FeatureInput {
  int64_t inputs = 0;
  int64_t outputs = 0;
};

struct BuiltinModel {
  std::vector<module::LayerSpec> layers;
  module::LossFunction loss;
  // A random micro-batch's inputs of `batch` samples (for profiling).
  std::function<module::Activation(int64_t batch)> sample_input;
  std::variant<TokenInput, FeatureInput> input;
  // The loss summed over the labels that count (not tensor_parallel::kIgnoreIndex), for a
  // mean over a whole batch's tokens (engine::TrainingConfig::per_token_loss); empty for a
  // model without tokens.
  module::LossFunction token_loss{};
  // Each token's loss, shaped as the labels (minus its log-probability; 0 where the label does
  // not count), for objectives built on per-token log-probabilities; empty for a model
  // without tokens.
  module::LossFunction token_losses{};

  // A language model's input, null for one that reads features.
  const TokenInput* tokens() const { return std::get_if<TokenInput>(&input); }
  const FeatureInput* features() const { return std::get_if<FeatureInput>(&input); }
  // Positions one sample trains: a language model's context, else 1.
  int64_t tokens_per_sample() const { return tokens() ? tokens()->context : 1; }
};

// The groups a model splits over: tensor (with Megatron's sequence parallelism), context
// (ring attention) and experts.
struct ModelGroups {
  tensor_parallel::Group tensor;
  context_parallel::Group context;
  expert_parallel::Group experts;
};

// A language model over `vocab_size` tokens in windows of `context` from its layers: the
// next-token cross-entropy (over a vocabulary split across `groups.tensor`, each rank's
// slice of the sequence under `groups.context`) as a mean and as a sum over the labels that
// count, random token windows as its sample input.
BuiltinModel language_model(std::vector<module::LayerSpec> layers, const ModelGroups& groups,
                            int64_t vocab_size, int64_t context);

// The families whose models read tokens (or features), quoted and joined for messages, e.g.
// "\"gpt\", \"llama\" or ...".
std::string builtin_types_reading(bool tokens);

// This rank's model, built by its family's row: with a tensor-parallel group of more than one
// rank its shard, with a context-parallel group its slice of each sequence, with an
// expert-parallel group its share of a mixture's experts. InputError (naming the families
// that can) for a group the family cannot split over.
BuiltinModel make_builtin_model(const ModelConfig& config, const tensor_parallel::Group& group = {},
                                const context_parallel::Group& context = {},
                                const expert_parallel::Group& experts = {});

}  // namespace pipetrain::models
