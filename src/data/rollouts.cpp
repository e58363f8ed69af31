#include "data/rollouts.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "pipetrain/io/errors.h"

namespace pipetrain::data {

RolloutCorpus rollout_corpus(const std::vector<std::string>& prefixes, int64_t vocab_size,
                             int64_t context, double validation_fraction) {
  if (!(validation_fraction > 0 && validation_fraction < 1))
    throw io::InputError("data.validation_fraction must be between 0 and 1");
  const std::string data = "data.paths " + indexed_prefix(prefixes.front());
  if (!has_loss_masks(prefixes)) {
    throw io::InputError(data +
                         ": no loss masks (PREFIX.mask): policy-gradient steps read rollouts as "
                         "prepared examples whose masks mark the completions");
  }
  RolloutCorpus corpus{read_examples(prefixes, vocab_size), {}, {}, {}, {}, {}};
  const auto count = static_cast<int64_t>(corpus.examples.spans.size());
  for (int64_t i = 0; i < count; ++i) {
    const ExampleSpan& span = corpus.examples.spans[static_cast<std::size_t>(i)];
    if (span.end - span.begin <= context + 1) continue;
    throw io::InputError(
        data + ": example " + std::to_string(i) + " has " + std::to_string(span.end - span.begin) +
        " tokens, more than the model's context + 1 (" + std::to_string(context + 1) + ")");
  }
  const auto held_out = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(static_cast<double>(count) * validation_fraction)));
  if (count - held_out < 1) {
    throw io::InputError(data + ": " + std::to_string(count) +
                         " examples, too few to hold some out for validation and train on the "
                         "rest");
  }
  for (int64_t i = 0; i < count; ++i)
    (i < count - held_out ? corpus.train : corpus.validation).push_back(i);
  return corpus;
}

RolloutSource::RolloutSource(std::shared_ptr<const RolloutCorpus> corpus, bool validation,
                             int64_t vocab_size, int64_t context, int64_t batch, uint64_t seed,
                             uint64_t stream, SampleShare share)
    : corpus_(std::move(corpus)),
      examples_(validation ? corpus_->validation : corpus_->train),
      vocab_size_(vocab_size),
      context_(context),
      batch_(batch),
      position_(batch, share),
      order_(seed, stream, static_cast<int64_t>(examples_.size())) {}

int64_t RolloutSource::example_of_sample(int64_t sample) {
  return examples_[static_cast<std::size_t>(order_.item_of(sample))];
}

engine::MicroBatch RolloutSource::next() {
  const RolloutCorpus& c = *corpus_;
  if (static_cast<int64_t>(c.advantages.size()) != c.examples.tokens->size())
    throw std::logic_error("rollouts drawn before their advantages were set");
  at::Tensor ids = at::empty({batch_, context_}, at::kLong);
  at::Tensor labels = at::empty({batch_, context_}, at::kLong);
  at::Tensor documents = at::empty({batch_, context_}, at::kLong);
  at::Tensor advantages = at::zeros({batch_, context_}, at::kFloat);
  at::Tensor old =
      at::full({batch_, context_}, std::numeric_limits<float>::quiet_NaN(), at::kFloat);
  at::Tensor ref = at::zeros({batch_, context_}, at::kFloat);
  for (int64_t i = 0; i < batch_; ++i) {
    const int64_t example = example_of_sample(position_.sample(i));
    const ExampleSpan& span = c.examples.spans[static_cast<std::size_t>(example)];
    const int64_t offset = i * context_;
    fill_row(*c.examples.tokens, *c.examples.masks, {span}, vocab_size_, context_,
             ids.data_ptr<int64_t>() + offset, labels.data_ptr<int64_t>() + offset,
             documents.data_ptr<int64_t>() + offset);
    // Position p predicts token p + 1 of the example.
    const int64_t predicted = std::min(span.end - span.begin, context_ + 1) - 1;
    for (int64_t p = 0; p < predicted; ++p) {
      const auto token = static_cast<std::size_t>(span.begin + p + 1);
      advantages.data_ptr<float>()[offset + p] = c.advantages[token];
      if (!c.old_logprobs.empty()) old.data_ptr<float>()[offset + p] = c.old_logprobs[token];
      if (!c.ref_logprobs.empty()) ref.data_ptr<float>()[offset + p] = c.ref_logprobs[token];
    }
  }
  position_.advance();
  return {{ids}, {labels, advantages, old, ref}};
}

}  // namespace pipetrain::data
