#include "trainer/objectives/rollout_data.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "checkpoint/safetensors.h"
#include "data/rollouts.h"
#include "pipetrain/io/errors.h"
#include "trainer/job.h"
#include "trainer/objectives/policy_gradient.h"

namespace pipetrain::trainer {
namespace {

void check_rollouts_trainable(const Job& job) {
  const auto& data = job.config.trainer.data;
  if (!job.config.objective.rollouts.empty() && data.type != DataKind::kIndexed)
    throw io::InputError(
        "objective.type \"policy_gradient\" trains on rollouts: data.type must be \"indexed\" "
        "(prepared examples whose masks mark the completions), not \"" +
        config::name_of(data_kinds(), data.type) + "\"");
  if (data.pack)
    throw io::InputError("data.pack: policy-gradient steps read one rollout per row; leave it off");
  if (job.config.layout.context > 1)
    throw io::InputError(
        "context_parallel: policy-gradient steps normalise over whole sequences; train them "
        "without context parallelism");
  if (!job.model.token_losses)
    throw io::InputError(
        "objective.type \"policy_gradient\" needs a language model (per-token log-probabilities)");
}

// The file's float32 tensor `name` as one value per token of the examples: given per token,
// or per example (spread over its tokens); empty where the file has none.
std::vector<float> per_token(const std::map<std::string, at::Tensor>& file, const std::string& name,
                             const std::string& key, const data::ExampleList& examples) {
  const auto found = file.find(name);
  if (found == file.end()) return {};
  const at::Tensor values = found->second.contiguous();
  const int64_t tokens = examples.tokens->size();
  const auto count = static_cast<int64_t>(examples.spans.size());
  if (values.scalar_type() != at::kFloat || values.dim() != 1 ||
      (values.numel() != tokens && values.numel() != count)) {
    throw io::InputError(key + ": " + name + " must be float32, one per token (" +
                         std::to_string(tokens) + ") or per example (" + std::to_string(count) +
                         "), not " + std::to_string(values.numel()) +
                         " values: rollouts of other examples");
  }
  const float* v = values.data_ptr<float>();
  if (values.numel() == tokens) return {v, v + tokens};
  std::vector<float> spread(static_cast<std::size_t>(tokens));
  for (int64_t i = 0; i < count; ++i) {
    const auto& span = examples.spans[static_cast<std::size_t>(i)];
    std::fill(spread.begin() + span.begin, spread.begin() + span.end, v[i]);
  }
  return spread;
}

// Reads objective.rollouts into the corpus, checked against its examples.
void read_rollouts(const ObjectiveConfig& o, data::RolloutCorpus& corpus) {
  const std::string key = "objective.rollouts " + o.rollouts;
  std::error_code error;
  if (!std::filesystem::is_regular_file(o.rollouts, error))
    throw io::InputError(key + ": no such file");
  std::map<std::string, at::Tensor> file;
  for (auto& [name, tensor] : checkpoint::map_safetensors(o.rollouts)) file[name] = tensor;
  const data::ExampleList& examples = corpus.examples;
  const auto count = static_cast<int64_t>(examples.spans.size());
  const auto offsets = file.find("offsets");
  if (offsets == file.end() || offsets->second.scalar_type() != at::kLong ||
      offsets->second.numel() != count + 1) {
    throw io::InputError(key + ": offsets must be int64 [examples + 1] = [" +
                         std::to_string(count + 1) + "], where each of the data's examples starts");
  }
  for (int64_t i = 0; i <= count; ++i) {
    const int64_t expected =
        i < count ? examples.spans[static_cast<std::size_t>(i)].begin : examples.tokens->size();
    if (offsets->second[i].item<int64_t>() != expected) {
      throw io::InputError(key + ": offsets[" + std::to_string(i) + "] is " +
                           std::to_string(offsets->second[i].item<int64_t>()) +
                           ", the data's example starts at " + std::to_string(expected) +
                           ": rollouts of other examples");
    }
  }
  corpus.advantages = per_token(file, "advantages", key, examples);
  if (corpus.advantages.empty()) throw io::InputError(key + ": no advantages");
  corpus.old_logprobs = per_token(file, "old_logprobs", key, examples);
  corpus.ref_logprobs = per_token(file, "ref_logprobs", key, examples);
  if (o.kl_beta() != 0 && corpus.ref_logprobs.empty())
    throw io::InputError(key + ": objective.beta " + std::to_string(o.kl_beta()) +
                         " weighs the KL to a reference, but the file has no ref_logprobs");
}

}  // namespace

void build_rollout_data(Job& job, const models::TokenInput& tokens, int64_t replica) {
  check_rollouts_trainable(job);
  const auto& data = job.config.trainer.data;
  const ObjectiveConfig& objective = job.config.objective;
  auto statistics = std::make_shared<PolicyStatistics>();
  job.objective_statistics = statistics;
  job.model.loss = policy_gradient_loss(job.model.token_losses, objective, false, statistics);
  job.model.token_loss = policy_gradient_loss(job.model.token_losses, objective, true, statistics);
  // dapo: the engine's mean over the global batch's tokens.
  job.config.engine.per_token_loss = objective.policy_loss == PolicyLoss::kDapo;
  if (objective.rollouts.empty()) {  // rollouts from the program, micro-batch by micro-batch
    job.data_summary = "data: rollouts from the program";
    return;
  }
  auto corpus = std::make_shared<data::RolloutCorpus>(data::rollout_corpus(
      data.paths, tokens.vocab_size, tokens.context, data.validation_fraction));
  read_rollouts(objective, *corpus);
  const data::SampleShare share{replica, job.grid->data_parallel_size()};
  auto source = [&](bool validation, uint64_t stream) {
    return std::make_unique<data::RolloutSource>(
        corpus, validation, tokens.vocab_size, tokens.context,
        job.config.engine.train_micro_batch_size_per_gpu,
        static_cast<uint64_t>(job.config.engine.seed), stream, share);
  };
  job.train_data = source(false, data::kTrainingStream);
  job.validation_data = source(true, data::kValidationStream);
  char line[200];
  std::snprintf(line, sizeof line,
                "data: %zu rollouts for training and %zu for validation; old log-probabilities "
                "%s, reference %s",
                corpus->train.size(), corpus->validation.size(),
                corpus->old_logprobs.empty() ? "the policy's own (on-policy)" : "given",
                corpus->ref_logprobs.empty() ? "none" : "given");
  job.data_summary = line;
}

}  // namespace pipetrain::trainer
