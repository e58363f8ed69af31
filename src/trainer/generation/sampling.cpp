#include "trainer/generation/sampling.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "context_parallel/whole_sequences.h"
#include "models/kv_cache.h"
#include "tensor_parallel/collectives.h"

namespace pipetrain::trainer {
namespace {

// The next token from the last position's logits (whole, double precision).
at::Tensor draw(at::Tensor logits, const SamplingOptions& options, at::Generator& generator) {
  if (options.temperature == 0) return logits.argmax().reshape({1});
  logits = logits / options.temperature;
  if (options.top_k > 0 && options.top_k < logits.numel()) {
    const at::Tensor kth = std::get<0>(logits.topk(options.top_k)).min();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
  }
  at::Tensor probabilities = at::softmax(logits, 0);
  if (options.top_p < 1) {
    // The likeliest tokens until their sum reaches top_p (at least one), as transformers'.
    const auto [sorted, order] = probabilities.sort(/*dim=*/0, /*descending=*/true);
    const at::Tensor before = sorted.cumsum(0) - sorted;  // the mass ahead of each token
    probabilities = at::zeros_like(probabilities)
                        .scatter(0, order, sorted.masked_fill(before >= options.top_p, 0));
  }
  return at::multinomial(probabilities, 1, false, generator);
}

// The drawn token's log-probability under the model's softmax at the temperature (1 when
// greedy), before top-k and top-p: what a trainer recomputes from the same logits.
double drawn_logprob(const at::Tensor& logits, int64_t token, const SamplingOptions& options) {
  const double temperature = options.temperature == 0 ? 1.0 : options.temperature;
  return at::log_softmax(logits / temperature, 0)[token].item<double>();
}

// One prompt's generation: its tokens, its cache, its own generator (seeded alike, so a
// prompt draws what it would alone), and where it stands in the current stretch.
struct Sequence {
  std::vector<int64_t> tokens;
  int64_t left = 0;           // new tokens still to draw
  std::vector<int64_t> stop;  // its own and the options' stop tokens
  models::KvCache cache;
  at::Generator generator;
  std::vector<int64_t> drawn;          // this stretch's tokens, one per round, not yet in `tokens`
  std::vector<double> drawn_logprobs;  // theirs, on the last stage
  std::vector<double> logprobs;        // each new token's in `tokens`
  int round = -1;                      // of the stretch, whose feed is chosen
  int64_t first = 0;                   // that feed: the positions [first, its length)
  int64_t fed = 0;                     // positions fed in that round, not yet counted as cached
};

// Micro-batches per stretch at most (rounds x groups), well inside the schedules' bounds.
constexpr int64_t kMostStretchMicroBatches = 4096;
// Rounds per stretch at most: a prompt that draws a stop token runs on to its stretch's
// end (its tokens after the stop are dropped), so stretches stay short.
constexpr int64_t kMaxRounds = 16;

// Where a round of a sequence of `size` tokens starts feeding, with `cached` positions in
// its cache: after them while the sequence fits the context, else the whole (sliding)
// window afresh (and always afresh without the cache).
struct RoundFeed {
  int64_t first;
  bool afresh;  // the cache starts over
};
RoundFeed round_feed(int64_t size, int64_t cached, const SamplingOptions& options,
                     int64_t context) {
  const bool afresh = !options.kv_cache || size > context;
  return {afresh ? std::max<int64_t>(0, size - context) : cached, afresh};
}

// Moves `sequence` to round `round` of the stretch (every rank, in round order, once per
// round): the last round's feed is cached now, and this round's is chosen (round_feed).
void begin_round(Sequence& sequence, int round, const SamplingOptions& options, int64_t context) {
  if (sequence.round == round) return;
  if (options.kv_cache) sequence.cache.advance(sequence.fed);
  const auto size = static_cast<int64_t>(sequence.tokens.size()) + round;
  const RoundFeed feed = round_feed(size, sequence.cache.length(), options, context);
  if (feed.afresh) sequence.cache.clear();
  sequence.first = feed.first;
  sequence.fed = size - feed.first;
  sequence.round = round;
}

// The tokens `sequence` feeds in its current round (begin_round), [1, positions].
at::Tensor feed_of(const Sequence& sequence) {
  std::vector<int64_t> feed;
  const auto held = static_cast<int64_t>(sequence.tokens.size());
  for (int64_t i = sequence.first; i < sequence.first + sequence.fed; ++i)
    feed.push_back(i < held ? sequence.tokens[i] : sequence.drawn.at(i - held));
  return at::tensor(feed, at::kLong).unsqueeze(0);
}

// How many positions `sequence` will feed in each of the next `rounds` rounds, as
// begin_round will choose them.
std::vector<int64_t> feed_lengths(const Sequence& sequence, int64_t rounds,
                                  const SamplingOptions& options, int64_t context) {
  std::vector<int64_t> lengths;
  int64_t cached = sequence.cache.length();
  for (int64_t round = 0; round < rounds; ++round) {
    const auto size = static_cast<int64_t>(sequence.tokens.size()) + round;
    const RoundFeed feed = round_feed(size, cached, options, context);
    lengths.push_back(size - feed.first);
    // As begin_round leaves the cache: cleared if afresh, then the feed counted as cached.
    if (options.kv_cache) cached = (feed.afresh ? 0 : cached) + lengths.back();
  }
  return lengths;
}

// The prompts that share one micro-batch, a row each.
using Rows = std::vector<Sequence*>;

// The prompts of one stretch: `rounds` tokens for each, streamed through the pipe as rounds
// x G micro-batches, the prompts in G groups of rows (micro-batch j is round j / G of group
// j % G). The last stage draws each row's token as its forward ends and sends the group's
// to the first stage, which feeds them G micro-batches later: with G at least the number of
// stages the first stage never waits for the pipe to drain between rounds. (One round when
// G is smaller on a pipe: the inference schedule's first stage loads micro-batch j before
// it sends j - 1, and with more than two stages or chunks the token of j - G would wait
// for that send.)
class Stretch {
 public:
  Stretch(engine::PipelineEngine& engine, std::vector<Rows> groups, int rounds,
          const SamplingOptions& options, int64_t context)
      : engine_(engine),
        grid_(engine.grid()),
        groups_(std::move(groups)),
        rounds_(rounds),
        options_(options),
        context_(context) {
    for (const Rows& rows : groups_) {
      for (Sequence* sequence : rows) {
        sequence->drawn.assign(rounds_, 0);
        sequence->drawn_logprobs.assign(rounds_, 0);
      }
    }
  }

  void run() {
    const int count = static_cast<int>(groups_.size()) * rounds_;
    {
      models::UsingKvCache using_cache(models::KvRows{});
      engine_.infer_streamed(
          count, {.input = [this](int j) { return module::Activation{input(j)}; },
                  .before_forward =
                      [&](int j) {
                        std::vector<models::KvCache*> caches;
                        for (Sequence* sequence : rows_of(j)) {
                          begin_round(*sequence, round_of(j), options_, context_);
                          caches.push_back(&sequence->cache);
                        }
                        using_cache.activate(options_.kv_cache ? models::KvRows(caches)
                                                               : models::KvRows());
                      },
                  .output = [this](int j, const module::Activation& out) { draw_at(j, out); }});
    }
    for (auto& send : sends_) send.wait();
    finish();
  }

 private:
  const Rows& rows_of(int j) const { return groups_.at(j % groups_.size()); }
  int round_of(int j) const { return j / static_cast<int>(groups_.size()); }
  // Whether this rank draws tokens that a first-stage rank other than itself feeds.
  bool sends_tokens() const {
    return rounds_ > 1 && engine_.output_stage() != 0 && grid_.sample_comm()->rank() == 0;
  }

  // The first stage's feed of micro-batch j ([rows, positions]), its rows' last round's
  // tokens received if drawn there.
  at::Tensor input(int j) {
    const Rows& rows = rows_of(j);
    const int round = round_of(j);
    if (round > 0 && !engine_.holds_output()) {
      const at::Tensor tokens = engine_.fed_back().at(0).cpu();
      const int64_t* received = tokens.data_ptr<int64_t>();
      for (std::size_t r = 0; r < rows.size(); ++r) rows[r]->drawn.at(round - 1) = received[r];
    }
    std::vector<at::Tensor> feeds;
    for (Sequence* sequence : rows) {
      begin_round(*sequence, round, options_, context_);
      feeds.push_back(feed_of(*sequence));
    }
    return at::cat(feeds, 0);  // the rows feed as many positions (see plan_stretch)
  }

  // The last stage's tokens of micro-batch j, a row each, from its last position's logits
  // (whole again from the tensor-parallel vocabulary slices), sent to the first stage if
  // it feeds them again.
  void draw_at(int j, const module::Activation& out) {
    const Rows& rows = rows_of(j);
    const int round = round_of(j);
    const at::Tensor logits = tensor_parallel::gather_from_group(
        out.at(0).select(1, -1), tensor_parallel::Group{grid_.tensor_comm()});  // [rows, vocab]
    at::Tensor tokens = at::empty({static_cast<int64_t>(rows.size())}, at::kLong);
    int64_t* drawn = tokens.data_ptr<int64_t>();
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const at::Tensor row = logits[static_cast<int64_t>(r)].to(at::kDouble);
      drawn[r] = draw(row, options_, rows[r]->generator).item<int64_t>();
      rows[r]->drawn.at(round) = drawn[r];
      rows[r]->drawn_logprobs.at(round) = drawn_logprob(row, drawn[r], options_);
    }
    if (round + 1 < rounds_ && sends_tokens()) sends_.push_back(engine_.feed_back({tokens}));
  }

  // Every rank takes the stretch's tokens from the last stage; each prompt keeps them up to
  // its first stop token.
  void finish() {
    Rows all;
    for (const Rows& rows : groups_) all.insert(all.end(), rows.begin(), rows.end());
    at::Tensor tokens = at::zeros({static_cast<int64_t>(all.size()), rounds_}, at::kLong);
    at::Tensor logprobs = at::zeros({static_cast<int64_t>(all.size()), rounds_}, at::kDouble);
    auto table = tokens.accessor<int64_t, 2>();  // [prompt, round]
    auto logprob_table = logprobs.accessor<double, 2>();
    if (engine_.holds_output()) {
      for (std::size_t k = 0; k < all.size(); ++k) {
        std::copy(all[k]->drawn.begin(), all[k]->drawn.end(), &table[k][0]);
        std::copy(all[k]->drawn_logprobs.begin(), all[k]->drawn_logprobs.end(),
                  &logprob_table[k][0]);
      }
    }
    grid_.pipe_comm()->broadcast(tokens, engine_.output_stage());
    grid_.pipe_comm()->broadcast(logprobs, engine_.output_stage());
    for (std::size_t k = 0; k < all.size(); ++k) {
      Sequence& sequence = *all[k];
      if (options_.kv_cache) sequence.cache.advance(sequence.fed);
      sequence.fed = 0;
      sequence.round = -1;
      for (int r = 0; r < rounds_ && sequence.left > 0; ++r) {
        const int64_t token = table[k][r];
        sequence.tokens.push_back(token);
        sequence.logprobs.push_back(logprob_table[k][r]);
        const auto& stop = sequence.stop;
        const bool stops = std::find(stop.begin(), stop.end(), token) != stop.end();
        sequence.left = stops ? 0 : sequence.left - 1;
      }
      sequence.drawn.clear();
    }
  }

  engine::PipelineEngine& engine_;
  const topology::Grid& grid_;
  std::vector<Rows> groups_;
  int rounds_;
  const SamplingOptions& options_;
  int64_t context_;
  std::vector<comm::PendingSend> sends_;  // the tokens fed back to the first stage
};

// The next stretch of `active`: its rounds (what each prompt still draws, at most
// kMaxRounds) and its groups of rows. With the cache, the prompts that feed as many
// positions share micro-batches (decode steps of one position, whole windows past the
// context), split into as many groups as the pipe has stages (fewer if fewer prompts), and
// the stretch ends before any prompt's feed changes length (after a prefill, where its
// window starts to slide); without, each prompt is a micro-batch of its own. One round
// where streaming cannot run (see Stretch).
std::pair<int, std::vector<Rows>> plan_stretch(const engine::PipelineEngine& engine,
                                               const Rows& active, const SamplingOptions& options,
                                               int64_t context) {
  int64_t rounds = kMaxRounds;
  for (const Sequence* sequence : active) rounds = std::min(rounds, sequence->left);
  std::map<int64_t, Rows> by_length;  // the rows of each feed length, in prompt order
  for (Sequence* sequence : active) {
    if (!options.kv_cache) {  // a group each
      by_length[static_cast<int64_t>(by_length.size())].push_back(sequence);
      continue;
    }
    const std::vector<int64_t> lengths = feed_lengths(*sequence, rounds, options, context);
    const auto same = std::find_if(lengths.begin(), lengths.end(),
                                   [&](int64_t length) { return length != lengths.front(); });
    rounds = std::min<int64_t>(rounds, same - lengths.begin());
    by_length[lengths.front()].push_back(sequence);
  }
  const int64_t stages = engine.grid().pipe_comm()->size();
  std::vector<Rows> groups;
  for (const auto& [length, rows] : by_length) {
    const auto count = static_cast<int64_t>(rows.size());
    const int64_t parts = std::min<int64_t>(count, stages);
    for (int64_t g = 0; g < parts; ++g)  // near-equal parts, in prompt order
      groups.emplace_back(rows.begin() + g * count / parts, rows.begin() + (g + 1) * count / parts);
  }
  const auto per_round = static_cast<int64_t>(groups.size());  // micro-batches
  if (stages > 1 && per_round < std::max<int64_t>(2, stages)) rounds = 1;
  rounds = std::clamp<int64_t>(kMostStretchMicroBatches / per_round, 1, rounds);
  return {static_cast<int>(rounds), std::move(groups)};
}

}  // namespace

std::vector<std::vector<int64_t>> sample_in_flight(engine::PipelineEngine& engine,
                                                   const std::vector<std::vector<int64_t>>& prompts,
                                                   int64_t count, const SamplingOptions& options,
                                                   int64_t context) {
  std::vector<PromptRequest> requests;
  for (const auto& prompt : prompts)
    requests.push_back({.tokens = prompt, .max_new_tokens = count});
  return sample_in_flight(engine, requests, options, context);
}

std::vector<std::vector<int64_t>> sample_in_flight(engine::PipelineEngine& engine,
                                                   const std::vector<PromptRequest>& prompts,
                                                   const SamplingOptions& options, int64_t context,
                                                   std::vector<std::vector<double>>* logprobs) {
  // Nothing cached may hold a graph, and no tensor made here is one autograd will see: no
  // version counters or autograd metadata on the many small tensors of a decode step.
  const c10::InferenceMode inference;
  // A decode step feeds one position: the sequence cannot split over a tensor-parallel group.
  const context_parallel::WholeSequences whole_sequences;
  std::vector<Sequence> sequences(prompts.size());
  if (options.max_in_flight < 1) throw std::invalid_argument("max_in_flight must be at least 1");
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    sequences[p].tokens = prompts[p].tokens;
    sequences[p].left = prompts[p].max_new_tokens;
    sequences[p].stop = prompts[p].stop;
    sequences[p].stop.insert(sequences[p].stop.end(), options.stop.begin(), options.stop.end());
    sequences[p].generator =
        at::make_generator<at::CPUGeneratorImpl>(prompts[p].seed.value_or(options.seed));
  }
  while (true) {
    std::vector<Sequence*> active;  // the first max_in_flight unfinished, in prompt order
    for (auto& sequence : sequences) {
      if (sequence.left > 0 && static_cast<int64_t>(active.size()) < options.max_in_flight)
        active.push_back(&sequence);
    }
    if (active.empty()) break;
    auto [rounds, groups] = plan_stretch(engine, active, options, context);
    Stretch(engine, std::move(groups), rounds, options, context).run();
  }
  std::vector<std::vector<int64_t>> texts;
  for (auto& sequence : sequences) {
    texts.push_back(std::move(sequence.tokens));
    if (logprobs) logprobs->push_back(std::move(sequence.logprobs));
  }
  return texts;
}

std::vector<int64_t> sample_tokens(engine::PipelineEngine& engine, std::vector<int64_t> prompt,
                                   int64_t count, const SamplingOptions& options, int64_t context) {
  return sample_in_flight(engine, {std::move(prompt)}, count, options, context).front();
}

}  // namespace pipetrain::trainer
