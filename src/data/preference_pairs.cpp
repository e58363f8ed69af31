#include "data/preference_pairs.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "pipetrain/io/errors.h"

namespace pipetrain::data {
namespace {

struct Side {
  std::vector<int64_t> tokens, masks;
  // The first token the loss counts (past the example's first token), or the length.
  int64_t answer_start() const {
    for (std::size_t t = 1; t < masks.size(); ++t)
      if (masks[t] == 1) return static_cast<int64_t>(t);
    return static_cast<int64_t>(masks.size());
  }
};

Side read_side(const ExampleList& examples, const ExampleSpan& span, int64_t vocab_size) {
  const int64_t length = span.end - span.begin;
  Side side{std::vector<int64_t>(static_cast<std::size_t>(length)),
            std::vector<int64_t>(static_cast<std::size_t>(length))};
  examples.tokens->read(span.begin, length, vocab_size, side.tokens.data());
  examples.masks->read(span.begin, length, 2, side.masks.data());
  return side;
}

void check_pair(const ExampleList& examples, int64_t pair, int64_t vocab_size, int64_t context,
                const std::string& data) {
  const std::string name = data + ": pair " + std::to_string(pair) + " (examples " +
                           std::to_string(2 * pair) + " and " + std::to_string(2 * pair + 1) + ")";
  std::vector<Side> sides;
  for (int64_t i : {2 * pair, 2 * pair + 1}) {
    const ExampleSpan& span = examples.spans[static_cast<std::size_t>(i)];
    if (span.end - span.begin > context + 1) {
      throw io::InputError(name + ": example " + std::to_string(i) + " has " +
                           std::to_string(span.end - span.begin) +
                           " tokens, more than the model's context + 1 (" +
                           std::to_string(context + 1) + "); prepare the pairs with --context " +
                           std::to_string(context));
    }
    sides.push_back(read_side(examples, span, vocab_size));
    if (sides.back().answer_start() == static_cast<int64_t>(sides.back().masks.size()))
      throw io::InputError(name + ": example " + std::to_string(i) +
                           " has no answer token the loss counts (its mask is 0)");
  }
  const int64_t prompt = sides[0].answer_start();
  const bool same = prompt == sides[1].answer_start() &&
                    std::equal(sides[0].tokens.begin(), sides[0].tokens.begin() + prompt,
                               sides[1].tokens.begin());
  if (!same) {
    throw io::InputError(name +
                         ": chosen and rejected share no prompt (their tokens before the first "
                         "answer token differ); DPO reads pairs as prepare-data --preference "
                         "writes them");
  }
}

}  // namespace

PreferenceCorpus preference_corpus(const std::vector<std::string>& prefixes, int64_t vocab_size,
                                   int64_t context, double validation_fraction) {
  if (!(validation_fraction > 0 && validation_fraction < 1))
    throw io::InputError("data.validation_fraction must be between 0 and 1");
  const std::string data = "data.paths " + indexed_prefix(prefixes.front());
  if (!has_loss_masks(prefixes)) {
    throw io::InputError(data +
                         ": no loss masks (PREFIX.mask): DPO reads preference pairs "
                         "(prepare-data --preference)");
  }
  PreferenceCorpus corpus{read_examples(prefixes, vocab_size), {}, {}, {}};
  const auto examples = static_cast<int64_t>(corpus.examples.spans.size());
  if (examples % 2 != 0) {
    throw io::InputError(data + ": " + std::to_string(examples) +
                         " examples, an odd number: preference pairs are chosen and rejected "
                         "as documents 2i and 2i + 1 (prepare-data --preference)");
  }
  const int64_t pairs = corpus.pairs();
  for (int64_t p = 0; p < pairs; ++p) check_pair(corpus.examples, p, vocab_size, context, data);
  const auto held_out = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(static_cast<double>(pairs) * validation_fraction)));
  if (pairs - held_out < 1) {
    throw io::InputError(data + ": " + std::to_string(pairs) +
                         " pairs, too few to hold some out for validation and train on the rest");
  }
  for (int64_t p = 0; p < pairs; ++p)
    (p < pairs - held_out ? corpus.train : corpus.validation).push_back(p);
  return corpus;
}

PairSource::PairSource(std::shared_ptr<const PreferenceCorpus> corpus, bool validation,
                       int64_t vocab_size, int64_t context, int64_t batch, uint64_t seed,
                       uint64_t stream, SampleShare share)
    : corpus_(std::move(corpus)),
      pairs_(validation ? corpus_->validation : corpus_->train),
      vocab_size_(vocab_size),
      context_(context),
      batch_(batch),
      position_(batch / 2, share),
      order_(seed, stream, static_cast<int64_t>(pairs_.size())) {
  if (batch % 2 != 0) {
    throw io::InputError("train_micro_batch_size_per_gpu " + std::to_string(batch) +
                         " is odd: DPO keeps each pair's chosen and rejected answers in one "
                         "micro-batch");
  }
}

int64_t PairSource::pair_of_sample(int64_t sample) {
  return pairs_[static_cast<std::size_t>(order_.item_of(sample))];
}

engine::MicroBatch PairSource::next() {
  if (corpus_->reference.size() != corpus_->examples.spans.size())
    throw std::logic_error("preference pairs drawn before their reference log-probabilities");
  at::Tensor ids = at::empty({batch_, context_}, at::kLong);
  at::Tensor labels = at::empty({batch_, context_}, at::kLong);
  at::Tensor documents = at::empty({batch_, context_}, at::kLong);
  at::Tensor reference = at::empty({batch_}, at::kDouble);
  for (int64_t i = 0; i < batch_ / 2; ++i) {
    const int64_t pair = pair_of_sample(position_.sample(i));
    for (int64_t side = 0; side < 2; ++side) {
      const int64_t row = 2 * i + side;
      const auto example = static_cast<std::size_t>(2 * pair + side);
      fill_row(*corpus_->examples.tokens, *corpus_->examples.masks,
               {corpus_->examples.spans[example]}, vocab_size_, context_,
               ids.data_ptr<int64_t>() + row * context_,
               labels.data_ptr<int64_t>() + row * context_,
               documents.data_ptr<int64_t>() + row * context_);
      reference.data_ptr<double>()[row] = corpus_->reference[example];
    }
  }
  position_.advance();
  return {{ids}, {labels, reference}};
}

}  // namespace pipetrain::data
