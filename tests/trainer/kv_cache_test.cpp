// Generation with a KV cache gives the tokens of generation without (the whole window run
// for every token), on 4 ranks at pipe 1, pipe 2, model 2 and pipe 2 x model 2, for the GPT
// and the grouped-query LLaMA, greedy and seeded sampling, 6 prompts of different lengths,
// the longest running past the context (where the window slides and the cache starts over).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>

#include "../engine/nccl_rules.h"
#include "models/kv_cache.h"
#include "models/llama/llama.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/groups/communicators.h"
#include "pipetrain/models/gpt/gpt.h"
#include "trainer/generation/sampling.h"

namespace pipetrain::trainer {
namespace {

constexpr int64_t kContext = 24;

struct Shape {
  int pipe, data, model;
};

std::unique_ptr<engine::PipelineEngine> random_model(const std::string& kind, const Shape& s,
                                                     std::shared_ptr<topology::Grid> grid,
                                                     int chunks = 1,
                                                     groups::CommunicatorTesting testing = {}) {
  auto comms = std::make_shared<groups::Communicators>(grid, device::DeviceKind::kCpu,
                                                       comm::Seconds(0), testing);
  const tensor_parallel::Group group = comms->tensor_group();
  std::vector<module::LayerSpec> layers;
  if (kind == "gpt") {
    layers = models::gpt_layers({.vocab_size = 64,
                                 .context = kContext,
                                 .d_model = 32,
                                 .heads = 4,
                                 .layers = 3,
                                 .dropout = 0.0},
                                group);
  } else {
    models::LlamaConfig c;
    c.vocab_size = 64;
    c.context = kContext;
    c.d_model = 32;
    c.heads = 4;
    c.num_key_value_heads = 2;
    c.intermediate_size = 48;
    c.layers = 3;
    layers = models::llama_layers(c, group);
  }
  engine::TrainingConfig config;
  config.train_micro_batch_size_per_gpu = 1;
  config.gradient_accumulation_steps = chunks > 1 ? s.pipe : 1;
  if (chunks > 1) config.pipeline.schedule.kind = schedule::Kind::kInterleaved;
  auto module = std::make_shared<module::PipelineModule>(
      layers, models::gpt_loss(group),
      module::PipelineModuleOptions{.stages = s.pipe,
                                    .stage_id = grid->stage_id(),
                                    .chunks = chunks,
                                    .placement = config.pipeline.schedule.placement(),
                                    .seed = 11});
  return std::make_unique<engine::PipelineEngine>(module, comms, config);
}

// A random `kind` model at pipe 2 x data 2.
std::unique_ptr<engine::PipelineEngine> pipe_two_model(const std::string& kind) {
  const Shape s{2, 2, 1};
  return random_model(kind, s,
                      std::make_shared<topology::Grid>(
                          topology::pipe_model_data_parallel_topology(s.pipe, s.data, s.model),
                          comm::MpiCommunicator::world()));
}

TEST(KvCache, GivesTheTokensOfTheWholeWindowRunForEveryToken) {
  auto world = comm::MpiCommunicator::world();
  ASSERT_EQ(world->size(), 4);
  for (const Shape& s : {Shape{1, 4, 1}, Shape{2, 2, 1}, Shape{1, 2, 2}, Shape{2, 1, 2}}) {
    auto grid = std::make_shared<topology::Grid>(
        topology::pipe_model_data_parallel_topology(s.pipe, s.data, s.model), world);
    for (const std::string kind : {"gpt", "llama"}) {
      auto engine = random_model(kind, s, grid);
      for (const double temperature : {0.0, 0.9}) {
        for (int64_t length : {1, 2, 3, 5, 8, 13}) {
          SCOPED_TRACE(kind + " pipe " + std::to_string(s.pipe) + " x model " +
                       std::to_string(s.model) + ", temperature " + std::to_string(temperature) +
                       ", prompt of " + std::to_string(length));
          std::vector<int64_t> prompt;
          for (int64_t i = 0; i < length; ++i) prompt.push_back((7 * i + length) % 64);
          SamplingOptions options{.temperature = temperature, .top_k = 8, .seed = 3};
          const auto cached = sample_tokens(*engine, prompt, 16, options, kContext);
          options.kv_cache = false;
          const auto whole = sample_tokens(*engine, prompt, 16, options, kContext);
          ASSERT_EQ(cached.size(), prompt.size() + 16);
          EXPECT_EQ(cached, whole);
        }
      }
    }
  }
}

// Prompts in flight (batched into a micro-batch per stage with the cache, one each
// without; streamed, the tokens sent from the last stage to the first) draw what each
// draws alone, with the cache and without, at pipe 1, 2 and 4.
TEST(KvCache, PromptsInFlightGiveEachPromptsTokensAlone) {
  auto world = comm::MpiCommunicator::world();
  for (const Shape& s : {Shape{1, 4, 1}, Shape{2, 2, 1}, Shape{2, 1, 2}, Shape{4, 1, 1}}) {
    auto grid = std::make_shared<topology::Grid>(
        topology::pipe_model_data_parallel_topology(s.pipe, s.data, s.model), world);
    for (const std::string kind : {"gpt", "llama"}) {
      auto engine = random_model(kind, s, grid);
      std::vector<std::vector<int64_t>> prompts;
      for (int64_t length : {1, 2, 3, 5, 8, 13}) {
        prompts.emplace_back();
        for (int64_t i = 0; i < length; ++i) prompts.back().push_back((5 * i + length) % 64);
      }
      for (const bool cache : {true, false}) {
        SCOPED_TRACE(kind + " pipe " + std::to_string(s.pipe) + " x model " +
                     std::to_string(s.model) + (cache ? ", cached" : ", whole window"));
        // Nucleus sampling, and a stop token that ends some prompts early.
        const SamplingOptions options{.temperature = 0.9,
                                      .top_k = 8,
                                      .seed = 4,
                                      .top_p = 0.8,
                                      .stop = {5},
                                      .kv_cache = cache};
        const auto together = sample_in_flight(*engine, prompts, 16, options, kContext);
        ASSERT_EQ(together.size(), prompts.size());
        for (std::size_t p = 0; p < prompts.size(); ++p) {
          EXPECT_EQ(together[p], sample_tokens(*engine, prompts[p], 16, options, kContext)) << p;
          const std::size_t fresh = together[p].size() - prompts[p].size();
          EXPECT_TRUE(fresh == 16 || (fresh >= 1 && fresh < 16 && together[p].back() == 5)) << p;
        }
      }
      // Fewer groups than stages (two prompts at pipe 4) run a round at a time.
      const SamplingOptions greedy{.temperature = 0, .top_k = 0, .seed = 1, .kv_cache = true};
      const std::vector<std::vector<int64_t>> two(prompts.begin() + 2, prompts.begin() + 4);
      const auto together = sample_in_flight(*engine, two, 8, greedy, kContext);
      for (std::size_t p = 0; p < two.size(); ++p)
        EXPECT_EQ(together[p], sample_tokens(*engine, two[p], 8, greedy, kContext)) << p;
    }
  }
}

// NCCL's rules for generation (held on the CPU): with every lane of the pipe matched by
// order alone and its sends blocking until received (testing::Rendezvous), prompts in
// flight draw what they draw over MPI's tags, and the output stage's tokens reach the first
// stage over the feedback lane of their own: at pipe 4 the pair's only lane, at pipe 2
// beside the lane that carries the pair's payloads the same way.
TEST(NcclRules, GenerationFeedsItsTokensBackOverALaneMatchedByOrder) {
  auto world = comm::MpiCommunicator::world();
  ASSERT_EQ(world->size(), 4);
  for (const Shape s : {Shape{4, 1, 1}, Shape{2, 2, 1}}) {
    SCOPED_TRACE("pipe " + std::to_string(s.pipe));
    auto grid = std::make_shared<topology::Grid>(
        topology::pipe_model_data_parallel_topology(s.pipe, s.data, s.model), world);
    std::vector<std::shared_ptr<testing::Rendezvous>> links;
    const groups::CommunicatorTesting testing{
        .wrap =
            [&](std::shared_ptr<comm::Communicator> made, groups::TensorGroup group) {
              if (group != groups::TensorGroup::kPipePair) return made;
              links.push_back(std::make_shared<testing::Rendezvous>(made));
              return std::shared_ptr<comm::Communicator>(links.back());
            },
        .pair_links = true};
    auto plain = random_model("llama", s, grid);
    auto rules = random_model("llama", s, grid, 1, testing);
    std::vector<std::vector<int64_t>> prompts;
    for (int64_t length : {1, 3, 5, 8, 13, 2}) {
      prompts.emplace_back();
      for (int64_t i = 0; i < length; ++i) prompts.back().push_back((3 * i + length) % 64);
    }
    const SamplingOptions options{
        .temperature = 0.9, .top_k = 8, .seed = 6, .top_p = 0.8, .stop = {}, .kv_cache = true};
    EXPECT_EQ(sample_in_flight(*rules, prompts, 8, options, kContext),
              sample_in_flight(*plain, prompts, 8, options, kContext));
    const int stage = grid->stage_id(), last = s.pipe - 1;
    if (stage == 0 || stage == last) {
      const auto& link = rules->communicators().pipe_links().at(stage == 0 ? last : 0);
      const auto& lanes = stage == 0 ? link.from : link.to;
      const auto& lane = lanes.at(schedule::Channel::feedback().tag());
      const auto& feedback = dynamic_cast<const testing::Rendezvous&>(*lane);
      EXPECT_GT(stage == 0 ? feedback.receives.load() : feedback.sends.load(), 0);
      // At pipe 2 the pair's payloads have a lane of their own the same way.
      const auto payloads = lanes.find(comm::kEveryTag);
      EXPECT_EQ(payloads != lanes.end(), s.pipe == 2);
      if (payloads != lanes.end()) {
        EXPECT_NE(payloads->second, lane);
      }
    }
  }
}

// Streamed over two model chunks per stage (the inference schedule's interleaved order):
// in flight as alone, for as many prompts as stages and more.
TEST(KvCache, PromptsInFlightOverTwoChunksPerStageGiveEachPromptsTokensAlone) {
  const Shape s{2, 2, 1};
  auto engine = random_model("gpt", s,
                             std::make_shared<topology::Grid>(
                                 topology::pipe_model_data_parallel_topology(s.pipe, s.data, 1),
                                 comm::MpiCommunicator::world()),
                             /*chunks=*/2);
  const SamplingOptions options{.temperature = 0, .top_k = 0, .seed = 1, .kv_cache = true};
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t length : {2, 3, 5, 4}) {
    prompts.emplace_back();
    for (int64_t i = 0; i < length; ++i) prompts.back().push_back((3 * i + length) % 64);
    SCOPED_TRACE(std::to_string(prompts.size()) + " prompts");
    const auto together = sample_in_flight(*engine, prompts, 10, options, kContext);
    for (std::size_t p = 0; p < prompts.size(); ++p)
      EXPECT_EQ(together[p], sample_tokens(*engine, prompts[p], 10, options, kContext)) << p;
  }
}

// Each prompt its own bounds: as many new tokens as it asks for, ending at its own stop
// token, in flight as alone.
TEST(KvCache, PromptsInFlightKeepTheirOwnLengthsAndStopTokens) {
  auto engine = pipe_two_model("gpt");
  const SamplingOptions options{.temperature = 0, .top_k = 0, .seed = 1, .kv_cache = true};
  // Each prompt's stop token is the third new token it draws alone, unbounded.
  const std::vector<std::vector<int64_t>> prompts{{1, 2, 3}, {9}, {4, 4, 4, 4, 4}};
  std::vector<PromptRequest> requests;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const auto alone = sample_tokens(*engine, prompts[p], 6, options, kContext);
    requests.push_back({.tokens = prompts[p],
                        .max_new_tokens = static_cast<int64_t>(2 + 2 * p),
                        .stop = {alone[prompts[p].size() + 2]}});
  }
  const auto together = sample_in_flight(*engine, requests, options, kContext);
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const auto alone = sample_in_flight(*engine, {requests[p]}, options, kContext).front();
    EXPECT_EQ(together[p], alone) << p;
    // Up to and with the first stop token, at most max_new_tokens.
    const auto unbounded = sample_tokens(*engine, prompts[p], 6, options, kContext);
    std::size_t expected = 0;
    while (expected < static_cast<std::size_t>(requests[p].max_new_tokens)) {
      if (unbounded[prompts[p].size() + expected++] == requests[p].stop[0]) break;
    }
    EXPECT_EQ(together[p].size() - prompts[p].size(), expected) << p;
    EXPECT_TRUE(std::equal(together[p].begin(), together[p].end(), unbounded.begin())) << p;
  }
  EXPECT_LT(together[0].size() - prompts[0].size(), 3u);  // bounded by its max_new_tokens
}

// Nucleus sampling with a vanishing top_p keeps the likeliest token only: greedy.
TEST(KvCache, ATinyTopPDrawsTheGreedyTokens) {
  auto engine = pipe_two_model("llama");
  const std::vector<int64_t> prompt{3, 1, 4, 1, 5};
  const auto greedy =
      sample_tokens(*engine, prompt, 12, {.temperature = 0, .top_k = 0, .seed = 1}, kContext);
  const auto nucleus = sample_tokens(
      *engine, prompt, 12, {.temperature = 1.5, .top_k = 0, .seed = 9, .top_p = 1e-9}, kContext);
  EXPECT_EQ(nucleus, greedy);
}

TEST(KvCache, HoldsEachLayersKeysAndValuesAndCountsPositions) {
  models::KvCache cache;
  const void* layer = &cache;
  const at::Tensor k = at::ones({1, 2, 3, 4}), v = at::zeros({1, 2, 3, 4});
  EXPECT_EQ(cache.extend(layer, k, v).keys.size(2), 3);
  cache.advance(3);
  const models::KvCache::Extended more = cache.extend(layer, k.narrow(2, 0, 1), v.narrow(2, 0, 1));
  EXPECT_EQ(more.keys.size(2), 4);
  EXPECT_EQ(more.first, 0);
  EXPECT_EQ(cache.length(), 3);  // advanced after the pass through every layer
  EXPECT_TRUE(models::active_kv_rows().empty());
  {
    const models::UsingKvCache using_cache(&cache);
    ASSERT_EQ(models::active_kv_rows().size(), 1);
    EXPECT_EQ(&models::active_kv_rows()[0], &cache);
    EXPECT_TRUE(models::active_kv_rows().positions(2).equal(at::arange(3, 5)));
  }
  EXPECT_TRUE(models::active_kv_rows().empty());
  cache.clear();
  EXPECT_EQ(cache.length(), 0);
}

// Room for positions grows by doubling: across several regrowths the cache returns exactly
// the keys and values fed so far, in order, and a later extend does not change views
// returned before it.
TEST(KvCache, KeepsEveryPositionFedAcrossRegrowths) {
  at::manual_seed(3);
  models::KvCache cache;
  const void* layer = &cache;
  const at::Tensor k = at::randn({2, 3, 100, 4}), v = at::randn({2, 3, 100, 4});
  int64_t fed = 0;
  at::Tensor first_keys;
  for (const int64_t step : {5, 1, 1, 20, 1, 40, 1, 31}) {
    const auto [keys, values, first] =
        cache.extend(layer, k.narrow(2, fed, step), v.narrow(2, fed, step));
    EXPECT_EQ(first, 0);
    fed += step;
    cache.advance(step);
    EXPECT_TRUE(at::equal(keys, k.narrow(2, 0, fed))) << fed;
    EXPECT_TRUE(at::equal(values, v.narrow(2, 0, fed))) << fed;
    if (!first_keys.defined()) first_keys = keys;  // a view, not a copy
  }
  EXPECT_EQ(fed, 100);
  EXPECT_TRUE(at::equal(first_keys, k.narrow(2, 0, 5)));
}

// With a sliding window a layer keeps only what a later position can see: the keys it
// returns are exactly positions [first, fed), first never past fed - window + 1 before the
// new ones, and the room stays bounded by the window, not the positions fed.
TEST(KvCache, KeepsOnlyTheSlidingWindow) {
  at::manual_seed(4);
  models::KvCache cache;
  const void* layer = &cache;
  constexpr int64_t kWindow = 8;
  const at::Tensor k = at::randn({1, 2, 200, 4}), v = at::randn({1, 2, 200, 4});
  int64_t fed = 0;
  for (const int64_t step : {5, 1, 1, 20, 1, 1, 1, 40, 1, 1, 31, 1, 1, 1, 1, 1, 1, 1, 1}) {
    const auto [keys, values, first] =
        cache.extend(layer, k.narrow(2, fed, step), v.narrow(2, fed, step), kWindow);
    EXPECT_LE(first, std::max<int64_t>(0, fed - (kWindow - 1))) << fed;
    fed += step;
    cache.advance(step);
    EXPECT_TRUE(at::equal(keys, k.narrow(2, first, fed - first))) << fed;
    EXPECT_TRUE(at::equal(values, v.narrow(2, first, fed - first))) << fed;
    EXPECT_LE(keys.size(2), 2 * (kWindow + 40)) << fed;
  }
  EXPECT_GT(fed, 100);
}

// The mask of new positions over kept ones: causal, and within the window.
TEST(KvCache, WindowMaskSeesTheLastWindowPositions) {
  const at::Tensor mask = models::causal_window_mask(10, 3, 7, 6, 3, at::kCPU);
  // queries 10, 11, 12 over keys 7..12: each sees itself and the two before.
  const at::Tensor want = at::tensor({0, 1, 1, 1, 0, 0,  //
                                      0, 0, 1, 1, 1, 0,  //
                                      0, 0, 0, 1, 1, 1},
                                     at::kLong)
                              .view({3, 6})
                              .to(at::kBool);
  EXPECT_TRUE(at::equal(mask, want)) << mask;
  EXPECT_TRUE(at::equal(models::causal_window_mask(0, 4, 0, 4, 0, at::kCPU),
                        at::ones({4, 4}, at::kBool).tril()));
}

// Attention of new positions over cached ones: what the whole sequence's causal attention
// gives at those positions.
TEST(KvCache, AttendsAsTheWholeSequenceWould) {
  at::manual_seed(5);
  const at::Tensor q = at::randn({1, 2, 7, 4}), k = at::randn({1, 2, 7, 4}),
                   v = at::randn({1, 2, 7, 4});
  const at::Tensor whole = at::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  models::KvCache cache;
  const at::Tensor first = models::cached_attention(cache, &cache, q.narrow(2, 0, 4),
                                                    k.narrow(2, 0, 4), v.narrow(2, 0, 4));
  cache.advance(4);
  const at::Tensor next = models::cached_attention(cache, &cache, q.narrow(2, 4, 2),
                                                   k.narrow(2, 4, 2), v.narrow(2, 4, 2));
  cache.advance(2);
  const at::Tensor last = models::cached_attention(cache, &cache, q.narrow(2, 6, 1),
                                                   k.narrow(2, 6, 1), v.narrow(2, 6, 1));
  EXPECT_TRUE(at::allclose(at::cat({first, next, last}, 2), whole, 1e-5, 1e-6));
}

}  // namespace
}  // namespace pipetrain::trainer
