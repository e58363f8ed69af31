#include "trainer/objectives/preference_data.h"

#include <cstdio>

#include "data/preference_pairs.h"
#include "pipetrain/io/errors.h"
#include "trainer/job.h"
#include "trainer/objectives/dpo.h"
#include "trainer/objectives/reference.h"

namespace pipetrain::trainer {
namespace {

void check_pairs_trainable(const Job& job) {
  const auto& data = job.config.trainer.data;
  if (data.type != DataKind::kIndexed)
    throw io::InputError(
        "objective.type \"dpo\" trains on preference pairs: data.type must be "
        "\"indexed\" (prepare-data --preference), not \"" +
        config::name_of(data_kinds(), data.type) + "\"");
  if (data.pack)
    throw io::InputError("data.pack: DPO scores each answer in a row of its own; leave it off");
  if (job.config.layout.context > 1)
    throw io::InputError(
        "context_parallel: DPO sums each answer's log-probabilities over its whole sequence; "
        "train it without context parallelism");
  if (models::capabilities(job.config.model).routed_experts > 0)
    throw io::InputError(
        "objective.type \"dpo\" with a mixture of experts: its reference is scored unpadded "
        "and the policy padded, which changes the experts' capacity; not yet supported");
  if (!job.model.token_losses)
    throw io::InputError("objective.type \"dpo\" needs a language model");
  const int64_t rows = job.config.engine.train_micro_batch_size_per_gpu;
  if (rows % 2 != 0) {
    throw io::InputError("train_micro_batch_size_per_gpu " + std::to_string(rows) +
                         " is odd: DPO keeps each pair's chosen and rejected answers in one "
                         "micro-batch");
  }
}

}  // namespace

void build_preference_data(Job& job, const models::TokenInput& tokens, int64_t replica) {
  check_pairs_trainable(job);
  const auto& data = job.config.trainer.data;
  auto corpus = std::make_shared<data::PreferenceCorpus>(data::preference_corpus(
      data.paths, tokens.vocab_size, tokens.context, data.validation_fraction));
  std::string reference;
  corpus->reference = reference_logprobs(job.config, corpus->examples, tokens.context,
                                         job.grid->world_comm(), &reference);
  const data::SampleShare share{replica, job.grid->data_parallel_size()};
  auto source = [&](bool validation, uint64_t stream) {
    return std::make_unique<data::PairSource>(corpus, validation, tokens.vocab_size, tokens.context,
                                              job.config.engine.train_micro_batch_size_per_gpu,
                                              static_cast<uint64_t>(job.config.engine.seed), stream,
                                              share);
  };
  job.train_data = source(false, data::kTrainingStream);
  job.validation_data = source(true, data::kValidationStream);
  auto statistics = std::make_shared<PreferenceStatistics>();
  job.objective_statistics = statistics;
  job.model.loss = dpo_loss(job.model.token_losses, job.config.objective, statistics);
  // The loss is a mean over pairs, not over tokens (a fine-tune's per_token_loss would take
  // the model's token loss instead).
  job.config.engine.per_token_loss = false;
  char line[160];
  std::snprintf(line, sizeof line,
                "data: %lld preference pairs, %zu for training and %zu for "
                "validation, both answers of a pair in one micro-batch; ",
                static_cast<long long>(corpus->pairs()), corpus->train.size(),
                corpus->validation.size());
  job.data_summary = line + reference;
}

}  // namespace pipetrain::trainer
