// The planner's cost model against hand-computed FLOPs and bytes, its predictions against
// closed forms, and its answers to inputs that leave no layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "pipetrain/io/errors.h"
#include "pipetrain/models/builtin_model.h"
#include "planner/planner.h"
#include "planner/transports.h"
#include "schedule/pair_order.h"

namespace pipetrain::planner {
namespace {

models::ModelConfig gpt(int64_t vocab, int64_t context, int64_t d, int64_t heads, int64_t layers) {
  models::ModelConfig config;
  config.type = models::family("gpt");
  config.gpt = {
      .vocab_size = vocab, .context = context, .d_model = d, .heads = heads, .layers = layers};
  return config;
}

// A cluster whose transfers and overheads are free: only FLOPs take time (1 GFLOP/s).
Cluster ideal(int64_t devices) {
  Cluster c;
  c.devices_per_node = devices;
  c.memory_bytes = 1e12;
  c.fp32_flops = c.bf16_flops = 1e9;
  c.memory_bandwidth = 1e30;
  c.intra_node = c.inter_node = c.host_staging = {1e30, 0};
  return c;
}

// A LLaMA of d 256 (4 heads, 2 key/value heads, MLP 704) over a 256-token vocabulary.
models::ModelConfig small_llama(int64_t context, int64_t layers) {
  models::ModelConfig model;
  model.type = models::family("llama");
  model.llama = {.vocab_size = 256,
                 .context = context,
                 .d_model = 256,
                 .heads = 4,
                 .num_key_value_heads = 2,
                 .intermediate_size = 704,
                 .layers = layers};
  return model;
}

TEST(LayerCost, GptBlockMatchesHandCountedFlopsAndBytes) {
  const auto layers = layer_costs(gpt(256, 16, 32, 4, 2));
  ASSERT_EQ(layers.size(), 5u);  // embedding, 2 blocks, norm, head
  const LayerCost& block = layers[1];
  // qkv 2·16·32·96, projection 2·16·32·32, MLP 2 · 2·16·32·128; scores and values 2 · 2·16²·32.
  EXPECT_DOUBLE_EQ(block.forward_flops, 98304 + 32768 + 262144 + 32768);
  EXPECT_DOUBLE_EQ(block.backward_input_flops, 393216 + 65536);
  EXPECT_DOUBLE_EQ(block.backward_weight_flops, 393216);
  EXPECT_EQ(block.parameters, 12 * 32 * 32 + 13 * 32);
  // 17 activations of [16, 32] kept, 4 of them replicated under tensor parallelism.
  EXPECT_DOUBLE_EQ(block.saved + block.split_saved, 17 * 16 * 32);
  EXPECT_DOUBLE_EQ(block.saved_bytes(2, 4), (4 * 512 + 13 * 512 / 2.0) * 4 + (4 * 16 + 4 * 16) * 4);
  EXPECT_DOUBLE_EQ(block.parameters_per_rank(2), 13 * 32 - 7 * 32 + (12 * 32 * 32 + 7 * 32) / 2.0);
  const LayerCost& head = layers[4];
  EXPECT_DOUBLE_EQ(head.forward_flops, 2 * 16 * 32 * 256);
  EXPECT_DOUBLE_EQ(head.backward_flops(), 2 * 2 * 16 * 32 * 256);
  EXPECT_EQ(head.tie_key, layers[0].tie_key);  // tied: one copy on a stage holding both
  EXPECT_EQ(layers[0].parameters, (256 + 16) * 32);
}

// Megatron-LM's count (Narayanan et al. 2021, eq. 3 without recomputation: 72·s·l·h²·(1 +
// s/6h + V/12lh) per sample) for its 1.7B model equals the sum over the planner's layers.
TEST(LayerCost, WholeModelMatchesMegatronFormula) {
  const double s = 2048, h = 2304, l = 24, V = 51200;
  double flops = 0;
  for (const auto& layer : layer_costs(gpt(51200, 2048, 2304, 24, 24)))
    flops += layer.forward_flops + layer.backward_flops();
  EXPECT_NEAR(flops / (72 * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))), 1.0, 1e-12);
}

// A small grouped-query LLaMA: vocabulary 128, d 32, 4 heads (2 key/value), MLP width 64.
models::ModelConfig llama(int64_t context, int64_t layers) {
  models::ModelConfig config;
  config.type = models::family("llama");
  config.llama = {.vocab_size = 128,
                  .context = context,
                  .d_model = 32,
                  .heads = 4,
                  .num_key_value_heads = 2,
                  .intermediate_size = 64,
                  .layers = layers};
  return config;
}

TEST(LayerCost, LlamaCountsGroupedQueryAttentionAndSwiGlu) {
  models::ModelConfig config = llama(8, 1);
  const auto layers = layer_costs(config);
  const LayerCost& block = layers[1];
  // q, o: 32x32; k, v: 32x16; gate, up: 32x64; down 64x32; two RMSNorm weights.
  EXPECT_EQ(block.parameters, 2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 64 + 2 * 32);
  EXPECT_DOUBLE_EQ(block.forward_flops,
                   2 * 8 * (2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 64) + 4 * 8 * 8 * 32);
  EXPECT_EQ(layers.back().parameters, 128 * 32);  // untied head
  config.type = models::family("mlp");
  EXPECT_THROW(layer_costs(config), io::InputError);
}

// Blocks dominate (vocabulary 4): the simulated bubble of 1F1B is (p-1)/(m+p-1) and of
// the interleaved schedule (p-1)/(v·m+p-1), as the closed forms say.
TEST(Prediction, BubblesMatchClosedForms) {
  engine::TrainingConfig training;
  training.pipeline.partition_method = module::PartitionMethod("type:GptBlock");
  const Workload w(gpt(4, 256, 256, 4, 8), training);
  for (int m : {4, 8, 16}) {
    Layout l{.parallel = {.pipe = 4}, .micro_batch = 1, .micro_batches = m};
    EXPECT_NEAR(predict(w, ideal(4), l).bubble, 3.0 / (m + 3), 0.01) << m;
    l.schedule = schedule::Kind::kInterleaved;
    l.parallel.chunks = 2;
    EXPECT_NEAR(predict(w, ideal(4), l).bubble, 3.0 / (2 * m + 3), 0.01) << m;
  }
}

// The V schedules place two chunks per stage in a V: with passes of equal cost (blocks
// dominate) their simulated bubble is below interleaving's; stage 0 holds both ends.
TEST(Prediction, VSchedulesPlaceChunksInAVAndCloseMoreBubble) {
  engine::TrainingConfig training;
  training.pipeline.partition_method = module::PartitionMethod("type:GptBlock");
  const Workload w(gpt(4, 256, 256, 4, 8), training);
  const Layout interleaved{.parallel = {.pipe = 4, .chunks = 2},
                           .micro_batch = 1,
                           .micro_batches = 8,
                           .schedule = schedule::Kind::kInterleaved};
  Layout zbv = interleaved;
  zbv.schedule = schedule::Kind::kZbv;
  Layout dualpipev = interleaved;
  dualpipev.schedule = schedule::Kind::kDualPipeV;
  const Prediction loop = predict(w, ideal(4), interleaved);
  for (const Layout& v : {zbv, dualpipev}) {
    const Prediction p = predict(w, ideal(4), v);
    EXPECT_LT(p.bubble, loop.bubble) << v.schedule_label();
    // The tied embedding and head both on stage 0: the last stage holds blocks only.
    EXPECT_LT(p.stages[3].weights, loop.stages[3].weights) << v.schedule_label();
  }
  EXPECT_EQ(zbv.schedule_label(), "zbv x2");
}

TEST(Prediction, StepTimeIsFlopsOverThroughputWithoutPipeline) {
  const Workload w(gpt(256, 16, 32, 4, 2), engine::TrainingConfig{});
  const Layout l{.micro_batch = 2, .micro_batches = 3};
  const Prediction p = predict(w, ideal(1), l);
  double flops = 0;
  for (const auto& layer : w.layers) flops += layer.forward_flops + layer.backward_flops();
  EXPECT_NEAR(p.step_seconds, 6 * flops / 1e9, 1e-12);
  EXPECT_NEAR(p.mfu, 1.0, 1e-9);
  EXPECT_DOUBLE_EQ(p.bubble, 0);
}

TEST(Prediction, StaticMemoryFollowsPrecisionAndZero) {
  engine::TrainingConfig training;
  const Workload fp32(gpt(256, 16, 32, 4, 2), training);
  double parameters = 0;
  for (int i = 0; i < 4; ++i) parameters += fp32.layers[i].parameters;  // head tied: once
  const Layout one{.micro_batch = 1, .micro_batches = 1};
  const StageMemory m = predict(fp32, ideal(2), one).stages.at(0);
  EXPECT_DOUBLE_EQ(m.weights, 4 * parameters);
  EXPECT_DOUBLE_EQ(m.gradients, 4 * parameters);
  EXPECT_DOUBLE_EQ(m.optimizer, 8 * parameters);  // Adam's two moments
  EXPECT_DOUBLE_EQ(m.masters, 0);
  EXPECT_EQ(m.live_micro_batches, 1);
  // The step's two temporaries of the largest tensor, the 256 x 32 embedding (fp32).
  EXPECT_DOUBLE_EQ(m.step_workspace, 2 * 4 * 256 * 32);
  EXPECT_DOUBLE_EQ(
      m.total(), m.weights + m.gradients + m.optimizer + std::max(m.activations, m.step_workspace));

  training.precision.dtype = optim::Precision::kBf16;
  const Workload bf16(gpt(256, 16, 32, 4, 2), training);
  const Layout zero{.parallel = {.data = 2}, .micro_batch = 1, .micro_batches = 1, .zero = 1};
  const StageMemory z = predict(bf16, ideal(2), zero).stages.at(0);
  EXPECT_DOUBLE_EQ(z.weights, 2 * parameters);
  EXPECT_DOUBLE_EQ(z.masters, 4 * parameters / 2);    // fp32 masters, sharded
  EXPECT_DOUBLE_EQ(z.optimizer, 8 * parameters / 2);  // sharded
  EXPECT_DOUBLE_EQ(z.buffers, 0);
  // Without ZeRO every bucket keeps its flat copy (fp32 on the wire by default), however
  // small the buckets.
  training.ddp_bucket_size = 1000;
  const Workload buckets(gpt(256, 16, 32, 4, 2), training);
  const Layout replicas{.parallel = {.data = 2}, .micro_batch = 1, .micro_batches = 1};
  EXPECT_DOUBLE_EQ(predict(buckets, ideal(2), replicas).stages.at(0).buffers, 4 * parameters);
}

// ZeRO 3 keeps the rank's pieces and prefetch + 1 layers gathered (all of them when kept
// after forward); 2 and 3 hold fp32 shard accumulators and no full gradient past a pass;
// 3's gathers, and 2's and 3's reduce-scatters per pass, cost time in the passes.
TEST(Prediction, ZeroStagesTwoAndThreeShardGradientsAndWeights) {
  engine::TrainingConfig training;
  Cluster cluster = ideal(4);
  const Workload w(gpt(256, 16, 32, 4, 4), training);
  auto at_stage = [&](const Workload& work, int zero) {
    return predict(
        work, cluster,
        Layout{.parallel = {.data = 4}, .micro_batch = 1, .micro_batches = 4, .zero = zero});
  };
  const Prediction zero1 = at_stage(w, 1), zero2 = at_stage(w, 2), zero3 = at_stage(w, 3);
  double parameters = 0, largest = 0;
  for (int i = 0; i < static_cast<int>(w.layers.size()); ++i) {
    if (i + 1 < static_cast<int>(w.layers.size()) || w.layers[i].tie_key.empty())
      parameters += w.layers[i].parameters;
    largest = std::max(largest, static_cast<double>(w.layers[i].parameters));
  }
  EXPECT_DOUBLE_EQ(zero1.stages[0].weights, 4 * parameters);
  EXPECT_DOUBLE_EQ(zero2.stages[0].weights, 4 * parameters);
  EXPECT_DOUBLE_EQ(zero3.stages[0].weights, 4 * (parameters / 4 + 2 * largest));  // prefetch 1
  EXPECT_LT(zero2.stages[0].gradients, zero1.stages[0].gradients);
  EXPECT_DOUBLE_EQ(zero3.stages[0].gradients, zero2.stages[0].gradients);
  EXPECT_LT(zero3.peak_bytes(), zero2.peak_bytes());
  EXPECT_LT(zero2.peak_bytes(), zero1.peak_bytes());
  training.zero.reshard_after_forward = false;
  const Workload kept(gpt(256, 16, 32, 4, 4), training);
  EXPECT_DOUBLE_EQ(at_stage(kept, 3).stages[0].weights, 4 * (parameters / 4 + parameters));
  // On a cluster whose links cost time, every gather and reduce-scatter shows.
  cluster.intra_node = {.bandwidth = 1e9, .latency = 1e-3};
  EXPECT_GT(at_stage(w, 2).pipeline_seconds, at_stage(w, 1).pipeline_seconds);
  EXPECT_GT(at_stage(w, 3).pipeline_seconds, at_stage(w, 2).pipeline_seconds);
  EXPECT_GT(at_stage(kept, 3).pipeline_seconds, at_stage(w, 2).pipeline_seconds);
  EXPECT_LT(at_stage(kept, 3).pipeline_seconds, at_stage(w, 3).pipeline_seconds);
}

// Context parallelism: each of c ranks computes 1/c of every sequence, so a rank's
// activations and FLOPs divide by c (on an ideal cluster the ring's passes are free).
// Sequence parallelism splits the replicated activations over t as well.
TEST(Prediction, ContextAndSequenceParallelismSplitTheActivations) {
  const Workload w(gpt(256, 64, 32, 4, 2), engine::TrainingConfig{});
  const Layout whole{.micro_batch = 2, .micro_batches = 1};
  const Layout halves{.parallel = {.context = 2}, .micro_batch = 2, .micro_batches = 1};
  const Prediction one = predict(w, ideal(2), whole), two = predict(w, ideal(2), halves);
  EXPECT_EQ(halves.devices(), 2);
  EXPECT_NEAR(two.stages.at(0).activations, one.stages.at(0).activations / 2, 1e-6);
  EXPECT_NEAR(two.step_seconds, one.step_seconds / 2, 1e-12);
  EXPECT_DOUBLE_EQ(two.stages.at(0).weights, one.stages.at(0).weights);  // replicated

  const Layout tensor{.parallel = {.tensor = 2}, .micro_batch = 2, .micro_batches = 1};
  Layout sequence = tensor;
  sequence.parallel.sequence_parallel = true;
  const double plain = predict(w, ideal(2), tensor).stages.at(0).activations;
  const double split = predict(w, ideal(2), sequence).stages.at(0).activations;
  EXPECT_LT(split, plain);
  // The blocks' replicated part (4 of 17 activations and the norm statistics) halves.
  const LayerCost& block = w.layers[1];
  EXPECT_DOUBLE_EQ(block.saved_bytes(2, 4, true),
                   (4 * 64 * 32 + 4 * 64 + 4 * 64) * 4 / 2.0 + 13 * 64 * 32 / 2.0 * 4);
}

TEST(Planner, OffersContextParallelismWhenOnlyItFits) {
  // A long sequence on 4 devices, one stage, micro-batches of 4: data 4, or context 2 x
  // data 2, or context 4; with memory for less than a third of one rank's activations at
  // context 1, only context 4 fits.
  const Workload w(gpt(256, 1024, 32, 4, 2), engine::TrainingConfig{});
  Cluster c = ideal(4);
  const double one =
      predict(w, c, Layout{.parallel = {.data = 4}, .micro_batch = 4, .micro_batches = 1})
          .peak_bytes();
  c.memory_bytes = 0.3 * one;
  LayoutLimits limits;
  limits.tensor = 1;
  limits.pipe = 1;
  limits.checkpointing = false;
  limits.micro_batch = 4;
  limits.zero = 0;
  const auto all = plan_layouts(w, c, 16, limits);
  ASSERT_FALSE(all.empty());
  ASSERT_TRUE(all.front().rejected.empty()) << all.front().rejected;
  std::set<int> contexts;
  for (const auto& candidate : all) {
    contexts.insert(candidate.layout.parallel.context);
    if (candidate.rejected.empty()) {
      EXPECT_EQ(candidate.layout.parallel.context, 4);
    }
  }
  EXPECT_EQ(contexts, (std::set<int>{1, 2, 4}));  // all three were assessed
}

// The GPT with attention dropout computes its weights in plain operators. At context 1 a
// block keeps the weights, the mask and the dropped weights ([heads, s, s] each) and its
// backward one more of their size; under ring attention it keeps the mask's rows and its
// blocks' temporaries, while each rank draws the whole mask in float for a moment. Context
// parallelism is offered for it (measured: bench/long_context_bench.sh with gpt-dropout).
TEST(Prediction, AttentionDropoutUnderContextParallelismKeepsTheMasksRows) {
  models::ModelConfig config = gpt(256, 64, 32, 4, 2);
  config.gpt.dropout = 0.1;
  const Workload w(config, engine::TrainingConfig{});
  const LayerCost& block = w.layers[1];
  const double square = 4.0 * 64 * 64;
  EXPECT_DOUBLE_EQ(block.saved_bytes(1, 4) - block.saved_bytes(1, 4, false, /*ring=*/true),
                   2 * square * 4);
  EXPECT_DOUBLE_EQ(block.workspace_bytes(1, 4, 1) - block.workspace_bytes(1, 4, 1, 2),
                   (square - 4 * square / 2) * 4);
  // Context 2 against context 1 (data 2): each rank's blocks keep a quarter of the
  // sequence-square part plus half the rest; at context 4 the mask each rank draws whole
  // ([4, 64, 64] floats per sample) is the largest transient.
  const Layout two{.parallel = {.context = 2}, .micro_batch = 1, .micro_batches = 1};
  const Layout four{.parallel = {.context = 4}, .micro_batch = 1, .micro_batches = 1};
  EXPECT_LT(
      predict(w, ideal(2), two).stages.at(0).activations,
      predict(w, ideal(2), Layout{.parallel = {.data = 2}, .micro_batch = 1, .micro_batches = 1})
              .stages.at(0)
              .activations /
          2);
  EXPECT_GE(predict(w, ideal(4), four).stages.at(0).activations, square * 4);
  LayoutLimits limits;
  limits.tensor = 1;
  limits.pipe = 1;
  std::set<int> contexts;
  for (const auto& candidate : plan_layouts(w, ideal(4), 4, limits))
    contexts.insert(candidate.layout.parallel.context);
  EXPECT_TRUE(contexts.count(2) && contexts.count(4));
}

models::ModelConfig mixtral(int64_t experts, int64_t top_k) {
  models::ModelConfig config = llama(16, 2);
  config.type = models::family("mixtral");
  config.moe.experts = experts;
  config.moe.experts_per_token = top_k;
  return config;
}

TEST(Prediction, ExpertParallelismSplitsTheExpertsAndPaysTheirAllToAll) {
  const Workload w(mixtral(4, 2), engine::TrainingConfig{});
  const LayerCost& block = w.layers[1];
  EXPECT_EQ(block.expert_parameters, 4 * 3 * 32 * 64);
  EXPECT_DOUBLE_EQ(block.dispatched, 16 * 2 * 32);  // k choices of d per token
  EXPECT_DOUBLE_EQ(block.parameters_per_rank(1, 2),
                   static_cast<double>(block.parameters - block.expert_parameters / 2));

  // Free links: the same step time, each rank holding half the experts.
  const Layout replicas{.parallel = {.data = 4}, .micro_batch = 2, .micro_batches = 1};
  Layout split = replicas;
  split.parallel.expert = 2;
  const Prediction whole = predict(w, ideal(4), replicas), halves = predict(w, ideal(4), split);
  const double experts = 2.0 * block.expert_parameters;  // two blocks
  EXPECT_NEAR(whole.stages.at(0).weights - halves.stages.at(0).weights, experts / 2 * 4, 1e-6);
  EXPECT_NEAR(halves.step_seconds, whole.step_seconds, 1e-12);
  // Two blocks' rows, 4 exchanges a step, fp32, 8 samples, half of them to the other rank.
  EXPECT_DOUBLE_EQ(halves.all_to_all_bytes, 2 * block.dispatched * 4 * 4 * 8 / 2.0);
  EXPECT_EQ(whole.all_to_all_bytes, 0);

  // Links of 1 GB/s without latency: in each pass (forward, and backward's gradients) each
  // block sends half of its rows to the other rank of its group and takes as many back.
  Cluster slow = ideal(4);
  slow.intra_node = slow.inter_node = {1e9, 0};
  const Prediction a = predict(w, slow, replicas), b = predict(w, slow, split);
  const double bytes = 2 * block.dispatched * 4;  // a micro-batch of 2 samples, fp32
  const double exchanges = 2 /* blocks */ * 2 /* passes */ * 2 /* there and back */;
  EXPECT_NEAR(b.pipeline_seconds - a.pipeline_seconds, exchanges * bytes / 2 / 1e9, 1e-12);
  // The experts' gradients are all-reduced over 2 holders, not 4: less data-parallel time.
  EXPECT_LT(b.data_parallel_seconds, a.data_parallel_seconds);
}

// ZeRO beside expert parallelism shards what every replica holds; the experts split over
// ranks keep whole state on each rank holding them, as the engine does.
// Data 4 at expert 2: the dense part sharded over the 4 replicas, the experts over the 2
// ranks holding each.
TEST(Prediction, ZeroShardsTheDenseOverTheReplicasAndExpertsOverTheirHolders) {
  const Workload w(mixtral(4, 2), engine::TrainingConfig{});
  const double experts = static_cast<double>(w.layers[1].expert_parameters);  // 2 blocks, halves
  Layout split{.parallel = {.data = 4}, .micro_batch = 2, .micro_batches = 1};
  split.parallel.expert = 2;
  Layout zero = split;
  zero.zero = 1;
  const StageMemory a = predict(w, ideal(4), split).stages.at(0);
  const StageMemory b = predict(w, ideal(4), zero).stages.at(0);
  const double p = a.weights / 4;      // fp32: this rank's parameters
  const double per = a.optimizer / p;  // optimizer bytes per parameter
  EXPECT_GT(per, 0);
  EXPECT_NEAR(b.optimizer, per * ((p - experts) / 4 + experts / 2), 1e-6);
  EXPECT_EQ(b.weights, a.weights);
  // Slow links: ZeRO 1's reduce-scatter and all-gather (fp32) cost an all-reduce, over the
  // 4 replicas for the dense part and the 2 holders for the experts; the step updates a
  // quarter of the dense part and half of the experts.
  Cluster slow = ideal(4);
  slow.intra_node = slow.inter_node = {1e9, 0};
  const Prediction c = predict(w, slow, split), d = predict(w, slow, zero);
  EXPECT_GT(c.data_parallel_seconds, 0);
  EXPECT_NEAR(d.data_parallel_seconds, c.data_parallel_seconds, 1e-12);
  EXPECT_NEAR(d.optimizer_seconds / c.optimizer_seconds, ((p - experts) / 4 + experts / 2) / p,
              1e-12);
}

TEST(Planner, OffersExpertSizesForAMixtureOfExpertsOnly) {
  LayoutLimits limits;
  limits.tensor = 1;
  limits.pipe = 1;
  limits.micro_batch = 1;
  limits.checkpointing = false;
  std::set<int> offered, zero_beside_experts;
  for (const auto& c : plan_layouts(Workload(mixtral(4, 2), {}), ideal(8), 8, limits)) {
    offered.insert(c.layout.parallel.expert);
    if (c.layout.parallel.expert > 1) zero_beside_experts.insert(c.layout.zero);
  }
  EXPECT_EQ(offered, (std::set<int>{1, 2, 4}));  // 8 is more than the experts
  EXPECT_EQ(zero_beside_experts, (std::set<int>{0, 1, 2, 3}));
  offered.clear();
  for (const auto& c : plan_layouts(Workload(gpt(256, 16, 32, 4, 2), {}), ideal(8), 8, limits))
    offered.insert(c.layout.parallel.expert);
  EXPECT_EQ(offered, (std::set<int>{1}));
}

TEST(Prediction, RanksSharingCoresComputeSlowerOnlyWhileCrowded) {
  const Workload w(gpt(4, 256, 256, 4, 8), engine::TrainingConfig{});
  const Layout pipe{.parallel = {.pipe = 4}, .micro_batch = 1, .micro_batches = 8};
  const Layout data{.parallel = {.data = 4}, .micro_batch = 1, .micro_batches = 8};
  Cluster shared = ideal(4);
  shared.shared_cores = 2;
  // Four replicas compute at once all the time: two cores give each half its speed.
  EXPECT_NEAR(predict(w, shared, data).pipeline_seconds,
              2 * predict(w, ideal(4), data).pipeline_seconds, 1e-9);
  // A pipeline of four is crowded only in its steady state: slower than four cores, faster
  // than four half-speed devices, and no faster than the work over two cores.
  const double alone = predict(w, ideal(4), pipe).pipeline_seconds;
  const double crowded = predict(w, shared, pipe).pipeline_seconds;
  double work = 0;
  for (const auto& layer : w.layers) work += 8 * (layer.forward_flops + layer.backward_flops());
  EXPECT_GT(crowded, alone * 1.2);
  EXPECT_LT(crowded, alone * 1.9);
  EXPECT_GE(crowded, work / 1e9 / 2 * 0.999);
  // shared_cores counts per node: two nodes of two ranks on two cores each are not crowded.
  Cluster nodes = ideal(2);
  nodes.nodes = 2;
  nodes.shared_cores = 2;
  EXPECT_DOUBLE_EQ(predict(w, nodes, data).pipeline_seconds,
                   predict(w, ideal(4), data).pipeline_seconds);
  // Messages wait for a core as often as the cores are busy.
  shared.shared_core_latency = 1e-3;
  EXPECT_GT(predict(w, shared, pipe).pipeline_seconds, crowded + 8 * 1e-3 * 0.3);
}

TEST(Prediction, TheStepsOwnMemoryCountsWhenItOutweighsTheActivations) {
  // A wide vocabulary on a short context: the step's Adam temporaries of the embedding
  // (2 x 4 x 4096 x 32 bytes) outweigh one micro-batch's activations.
  const Workload w(gpt(4096, 4, 32, 4, 1), engine::TrainingConfig{});
  const StageMemory m =
      predict(w, ideal(1), Layout{.micro_batch = 1, .micro_batches = 1}).stages[0];
  EXPECT_DOUBLE_EQ(m.step_workspace, 2 * 4 * 4096 * 32);
  EXPECT_GT(m.step_workspace, m.activations);
  EXPECT_DOUBLE_EQ(m.total(), m.weights + m.gradients + m.optimizer + m.buffers + m.step_workspace);
}

TEST(Prediction, OneF1BKeepsFewerMicroBatchesLiveThanGpipe) {
  const Workload w(gpt(256, 16, 32, 4, 6), engine::TrainingConfig{});
  Layout l{.parallel = {.pipe = 2}, .micro_batch = 1, .micro_batches = 8};
  EXPECT_EQ(predict(w, ideal(2), l).stages[0].live_micro_batches, 2);
  l.schedule = schedule::Kind::kGpipe;
  EXPECT_EQ(predict(w, ideal(2), l).stages[0].live_micro_batches, 8);
  l.schedule = schedule::Kind::k1F1B;
  l.checkpointing = true;  // the forward again in backward: more time, less memory
  const Prediction checkpointed = predict(w, ideal(2), l);
  l.checkpointing = false;
  const Prediction plain = predict(w, ideal(2), l);
  EXPECT_GT(checkpointed.step_seconds, plain.step_seconds);
  EXPECT_LT(checkpointed.stages[0].activations, plain.stages[0].activations);
  // The loss is outside the checkpointed layers: GPipe keeps all 8 micro-batches' float32
  // log-softmax ([16, 256] each) on the last stage, checkpointing or not.
  l.schedule = schedule::Kind::kGpipe;
  l.checkpointing = true;
  EXPECT_GE(predict(w, ideal(2), l).stages[1].activations, 8 * 16 * 256 * 4.0);
}

// Selective recompute frees each part's activations for its forward again in backward,
// and the planner chooses it per stage: with memory between what the last stage and the
// first need under 1F1B (2 micro-batches live on stage 0, 1 on stage 1), stage 0 recomputes
// and stage 1 does not, each stage fits, and the run costs less than whole-layer
// checkpointing.
TEST(Planner, ChoosesSelectiveRecomputePerStage) {
  const models::ModelConfig model = small_llama(512, 8);
  const Workload w(model, engine::TrainingConfig{});
  Layout l{.parallel = {.pipe = 2}, .micro_batch = 1, .micro_batches = 4};
  const Prediction plain = predict(w, ideal(2), l);
  using K = module::RecomputeKind;
  l.recompute = {module::RecomputeSet().add(K::kMlp), module::RecomputeSet()};
  const Prediction mlp = predict(w, ideal(2), l);
  EXPECT_GT(mlp.step_seconds, plain.step_seconds);
  EXPECT_LT(mlp.stages[0].activations, plain.stages[0].activations);
  EXPECT_DOUBLE_EQ(mlp.stages[1].activations, plain.stages[1].activations);
  // 4 of the 8 blocks on stage 0, 2 micro-batches live: each frees its gate, up, silu and
  // product ([512, 704] each, float32), but for one block of one micro-batch, whose
  // backward computes them again.
  EXPECT_NEAR(plain.stages[0].activations - mlp.stages[0].activations,
              (2 * 4 - 1) * 4 * 512 * 704 * 4.0, 1.0);

  Cluster c = ideal(2);
  c.memory_bytes = (plain.stages[0].total() + plain.stages[1].total()) / 2;
  ASSERT_GT(plain.stages[0].total(), c.memory_bytes);
  ASSERT_LT(plain.stages[1].total(), c.memory_bytes);
  LayoutLimits limits;
  limits.pipe = 2;
  limits.tensor = 1;
  limits.micro_batch = 1;
  limits.zero = 0;
  limits.schedule = schedule::Kind::k1F1B;
  const auto all = plan_layouts(w, c, 4, limits);
  ASSERT_TRUE(all.front().rejected.empty()) << all.front().rejected;
  const Candidate& best = all.front();
  EXPECT_FALSE(best.layout.checkpointing);
  ASSERT_TRUE(best.layout.recomputes());
  EXPECT_FALSE(best.layout.recompute_of(0).empty());
  EXPECT_TRUE(best.layout.recompute_of(1).empty());
  for (const auto& stage : best.prediction.stages) EXPECT_LE(stage.total(), c.memory_bytes);
  const auto whole = std::find_if(all.begin(), all.end(), [](const Candidate& candidate) {
    return candidate.layout.checkpointing && candidate.rejected.empty();
  });
  ASSERT_NE(whole, all.end());
  EXPECT_LT(best.prediction.step_seconds, whole->prediction.step_seconds);
}

// Recomputing a part repeats its communication as well as its FLOPs: the MLP's
// row-parallel all-reduce under tensor parallelism, attention's ring passes under context
// parallelism. With free links only the FLOPs count; with slow ones each repeat costs its
// transfer once per micro-batch and block.
TEST(Prediction, RecomputeRepeatsItsCommunication) {
  const models::ModelConfig model = small_llama(512, 4);
  const Workload w(model, engine::TrainingConfig{});
  using K = module::RecomputeKind;
  const auto added = [&](const Cluster& c, Layout l, K kind) {
    const double plain = predict(w, c, l).step_seconds;
    l.recompute = {module::RecomputeSet().add(kind)};
    return predict(w, c, l).step_seconds - plain;
  };
  Cluster slow = ideal(2);
  slow.intra_node = slow.inter_node = slow.host_staging = {1e6, 0};  // 1 MB/s
  const Layout tensor{.parallel = {.tensor = 2}, .micro_batch = 1, .micro_batches = 2};
  // An all-reduce of [512, 256] float32 over 2 ranks moves it once: 0.52 s at 1 MB/s, for
  // each of 4 blocks and 2 micro-batches.
  EXPECT_NEAR(added(slow, tensor, K::kMlpActivation) - added(ideal(2), tensor, K::kMlpActivation),
              4 * 2 * 512 * 256 * 4.0 / 1e6, 0.01);
  EXPECT_NEAR(added(slow, tensor, K::kNorms), added(ideal(2), tensor, K::kNorms), 1e-9);
  const Layout ring{.parallel = {.context = 2}, .micro_batch = 1, .micro_batches = 2};
  // The ring's keys and values ([256, 128] each: half the sequence, two key/value heads),
  // one pass forward again, for each block and micro-batch.
  EXPECT_NEAR(added(slow, ring, K::kAttention) - added(ideal(2), ring, K::kAttention),
              4 * 2 * 2 * 256 * 128 * 4.0 / 1e6, 0.01);
  EXPECT_GT(added(ideal(2), ring, K::kAttention), 0.0);  // attention's FLOPs again
}

// Under LoRA only the adapters train: the optimizer state, gradients and their reduction
// are the adapters', the weights the whole model's.
TEST(Prediction, LoraTrainsOnlyTheAdapters) {
  const models::ModelConfig model = small_llama(64, 4);
  engine::TrainingConfig training;
  training.optimizer = {"AdamW", {{"lr", 1e-4}}};
  const Layout l{.parallel = {.pipe = 2, .data = 2}, .micro_batch = 1, .micro_batches = 4};
  const Prediction whole = predict(Workload(model, training), ideal(4), l);
  module::LoraConfig lora{.rank = 8, .target_modules = {"q_proj", "down_proj"}, .layers = {0, 3}};
  const Prediction adapted = predict(Workload(model, training, lora), ideal(4), l);
  // Blocks 0 and 3, one per stage: q_proj's A [8, 256] and B [256, 8], down_proj's A
  // [8, 704] and B [256, 8]; Adam keeps two fp32 moments of each.
  const double adapters = 8 * (256 + 256) + 8 * (704 + 256);
  for (int s = 0; s < 2; ++s) {
    EXPECT_DOUBLE_EQ(adapted.stages[s].optimizer, 2 * 4 * adapters) << "stage " << s;
    EXPECT_DOUBLE_EQ(adapted.stages[s].gradients, 4 * adapters) << "stage " << s;
    EXPECT_DOUBLE_EQ(adapted.stages[s].weights, whole.stages[s].weights + 4 * adapters);
    EXPECT_LT(adapted.stages[s].total(), whole.stages[s].total());
  }
  EXPECT_LT(adapted.data_parallel_seconds, whole.data_parallel_seconds);
  EXPECT_LT(adapted.pipeline_seconds, whole.pipeline_seconds);  // no frozen weight gradients
}

TEST(Planner, PicksTensorParallelismInsideANodeOnly) {
  Cluster c = ideal(4);
  c.nodes = 2;
  c.devices_per_node = 2;
  const Workload w(gpt(256, 16, 32, 4, 4), engine::TrainingConfig{});
  for (const auto& candidate : plan_layouts(w, c, 8)) {
    EXPECT_LE(candidate.layout.parallel.tensor, 2);
    EXPECT_EQ(candidate.layout.devices(), 4);
    EXPECT_EQ(candidate.layout.global_batch(), 8);
  }
}

// A program's family is planned from the costs its row gives: its layers as given, read
// from model.params, and no tensor parallelism where its capabilities allow none.
models::BuiltinModel never_built(const models::ModelConfig&, const models::ModelGroups&) {
  throw std::logic_error("the planner builds no model");
}

TEST(Planner, PlansAProgramsFamilyFromItsRowsCosts) {
  models::register_family({
      .name = "planned_lm",
      .costs =
          [](const models::ModelConfig& c) {
            std::vector<LayerCost> layers;
            for (int64_t i = 0; i < c.params.at("layers").get<int64_t>(); ++i) {
              LayerCost layer{.type = "Block", .parameters = 1 << 20, .forward_flops = 4e9};
              layer.backward_input_flops = layer.backward_weight_flops = 4e9;
              layer.saved = layer.output = 4096;
              layer.width = 1024;
              layers.push_back(layer);
            }
            return layers;
          },
      .build = never_built,
  });
  EXPECT_THROW(models::register_family({.name = "planned_lm", .build = never_built}),
               std::logic_error);  // taken
  EXPECT_THROW(models::register_family({.name = "gpt", .build = never_built}),
               std::logic_error);                                                 // built in
  EXPECT_THROW(models::register_family({.name = "other_lm"}), std::logic_error);  // no build
  models::ModelConfig model;
  model.type = models::family("planned_lm");
  model.params = {{"layers", 6}};
  const std::vector<LayerCost> layers = layer_costs(model);
  ASSERT_EQ(layers.size(), 6u);
  EXPECT_EQ(layers[2].parameters, 1 << 20);
  const Workload w(model, engine::TrainingConfig{});
  const auto candidates = plan_layouts(w, ideal(4), 16);
  ASSERT_FALSE(candidates.empty());
  std::set<int> pipes;
  for (const auto& candidate : candidates) {
    EXPECT_EQ(candidate.layout.parallel.tensor, 1);
    EXPECT_EQ(candidate.layout.devices(), 4);
    if (candidate.rejected.empty()) {
      EXPECT_GT(candidate.prediction.step_seconds, 0);
    }
    pipes.insert(candidate.layout.parallel.pipe);
  }
  EXPECT_GT(pipes.size(), 1u);  // pipelines of its six layers are offered too
  // A family without costs: one line naming it and those the planner can cost.
  models::register_family({.name = "unplanned_lm", .build = never_built});
  model.type = models::family("unplanned_lm");
  try {
    layer_costs(model);
    ADD_FAILURE() << "no InputError";
  } catch (const io::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("\"unplanned_lm\" cannot be costed"), std::string::npos)
        << e.what();
  }
}

// On GPUs each group's transport is the engine's: NCCL for data, tensor and experts, and for
// the pipe under every schedule (over lanes that keep each plan's orders, a ring link from
// the last stage to the first included) and the context ring. On CPUs MPI everywhere.
TEST(Transports, FollowTheEnginesRules) {
  Cluster gpus = ideal(8);
  Layout l{.parallel = {.pipe = 4, .tensor = 2}, .micro_batch = 1, .micro_batches = 8};
  Transports t = transports_of(gpus, l);
  EXPECT_EQ(t.pipe, Transport::kNccl);
  EXPECT_EQ(t.tensor, Transport::kNccl);
  EXPECT_EQ(t.data, Transport::kNccl);
  EXPECT_FALSE(t.host_staged(l));
  EXPECT_EQ(t.describe(l), "pipe nccl, tensor nccl");
  l.schedule = schedule::Kind::kInterleaved;
  l.parallel.chunks = 2;
  EXPECT_EQ(transports_of(gpus, l).pipe, Transport::kNccl);  // with a ring link 3 -> 0
  l.parallel.pipe = 2;
  EXPECT_EQ(transports_of(gpus, l).pipe, Transport::kNccl);
  l.parallel.context = 2;
  t = transports_of(gpus, l);
  EXPECT_EQ(t.context, Transport::kNccl);
  EXPECT_FALSE(t.host_staged(l));
  EXPECT_EQ(t.describe(l), "pipe nccl, tensor nccl, context nccl");
  // Each schedule the planner offers, at pipe 4 and 8 micro-batches, over NCCL: where a
  // pair's transfers come out of the order they are sent (a V's chunks, interleaving's),
  // each channel takes a lane of its own; interleaving over 4 stages has a ring link 3 -> 0.
  for (const schedule::Kind kind :
       {schedule::Kind::k1F1B, schedule::Kind::kGpipe, schedule::Kind::kZbH1, schedule::Kind::kZbH2,
        schedule::Kind::kInterleaved, schedule::Kind::kInterleavedZb, schedule::Kind::kLoopedBfs,
        schedule::Kind::kZbv, schedule::Kind::kDualPipeV}) {
    const bool chunked = schedule::schedule_kind(kind).uses_chunks;
    const Layout k{.parallel = {.pipe = 4, .chunks = chunked ? 2 : 1},
                   .micro_batch = 1,
                   .micro_batches = 8,
                   .schedule = kind};
    EXPECT_EQ(transports_of(gpus, k).pipe, Transport::kNccl) << schedule::name(kind);
  }
  Cluster cpus = gpus;
  cpus.gpu = false;
  t = transports_of(cpus, l);
  EXPECT_EQ(t.pipe, Transport::kMpi);
  EXPECT_EQ(t.context, Transport::kMpi);
  EXPECT_EQ(t.tensor, Transport::kMpi);
}

// A group through host memory would be costed on the host_staging link, and none of the
// layouts the planner offers on GPUs takes one (every pipe has lanes, the ring is NCCL's).
TEST(Prediction, HostStagingIsCostedOnTheHostLinkAndNoPlannedGpuLayoutTakesIt) {
  Cluster c = ideal(4);
  c.host_staging = {1e4, 1e-3};
  EXPECT_EQ(&link_of(c, Transport::kHostStaged, c.intra_node), &c.host_staging);
  EXPECT_EQ(&link_of(c, Transport::kNccl, c.intra_node), &c.intra_node);
  const Workload w(gpt(256, 1024, 32, 4, 2), engine::TrainingConfig{});
  const auto all = plan_layouts(w, c, 16);
  ASSERT_GT(all.size(), 4u);
  bool context = false;
  for (const auto& candidate : all) {
    EXPECT_FALSE(candidate.prediction.transports.host_staged(candidate.layout))
        << candidate.prediction.transports.describe(candidate.layout);
    context = context || candidate.layout.parallel.context > 1;
  }
  EXPECT_TRUE(context);  // context-parallel layouts were among them
}

// Among the layouts within 1% of the fastest, the lower peak ranks first; past 1%, time.
TEST(Planner, RanksByTimeThenPeakWithinOnePercent) {
  const Workload w(gpt(256, 64, 64, 4, 8), engine::TrainingConfig{});
  Cluster c = ideal(4);
  c.intra_node = c.inter_node = c.host_staging = {1e10, 1e-5};
  const auto all = plan_layouts(w, c, 16);
  ASSERT_GT(all.size(), 2u);
  double fastest = all.front().prediction.step_seconds;
  for (const auto& candidate : all) {
    if (candidate.rejected.empty()) fastest = std::min(fastest, candidate.prediction.step_seconds);
  }
  std::size_t close = 0;  // the leading layouts within 1% of the fastest
  while (close < all.size() && all[close].rejected.empty() &&
         all[close].prediction.step_seconds <= 1.01 * fastest)
    ++close;
  ASSERT_GE(close, 2u) << "the test needs layouts that tie";
  for (std::size_t i = 1; i < close; ++i)
    EXPECT_LE(all[i - 1].prediction.peak_bytes(), all[i].prediction.peak_bytes()) << i;
  for (std::size_t i = close; i < all.size(); ++i) {  // none within 1% comes later
    EXPECT_TRUE(!all[i].rejected.empty() || all[i].prediction.step_seconds > 1.01 * fastest) << i;
  }
  for (std::size_t i = close + 1; i < all.size() && all[i].rejected.empty(); ++i)
    EXPECT_LE(all[i - 1].prediction.step_seconds, all[i].prediction.step_seconds) << i;
}

TEST(Planner, MarksLayoutsThatDoNotFit) {
  Cluster c = ideal(2);
  c.memory_bytes = 1e3;  // nothing fits
  const Workload w(gpt(256, 16, 32, 4, 4), engine::TrainingConfig{});
  const auto all = plan_layouts(w, c, 8);
  ASSERT_FALSE(all.empty());
  for (const auto& candidate : all)
    EXPECT_NE(candidate.rejected.find("out of memory"), std::string::npos);
}

TEST(Planner, RefusesLimitsThatLeaveNoLayout) {
  const Workload w(gpt(256, 16, 32, 4, 4), engine::TrainingConfig{});
  LayoutLimits limits;
  limits.data = 3;  // 3 does not divide a batch of 8 (nor the 2 devices)
  EXPECT_THROW(plan_layouts(w, ideal(2), 8, limits), io::InputError);
  EXPECT_THROW(plan_layouts(w, ideal(2), 0), io::InputError);
  limits = {};
  limits.devices = 3;
  EXPECT_THROW(plan_layouts(w, ideal(2), 8, limits), io::InputError);
}

TEST(Cluster, FileErrorsNameTheKey) {
  const auto path = std::filesystem::temp_directory_path() / "planner_test_cluster.json";
  const std::string valid = R"({"nodes": 1, "devices_per_node": 8, "memory_gib": 80,
    "peak_tflops": {"fp32": 67, "bf16": 989}, "efficiency": 0.5, "memory_bandwidth_gbs": 3000,
    "intra_node": {"bandwidth_gbs": 450, "latency_us": 5},
    "inter_node": {"bandwidth_gbs": 50, "latency_us": 10})";
  std::ofstream(path) << valid << "}";
  const Cluster c = read_cluster(path);
  EXPECT_DOUBLE_EQ(c.achieved_flops(true, 4096), 989e12 * 0.5);  // half_width 0: any width
  EXPECT_EQ(&c.link(8, 1), &c.intra_node);
  EXPECT_EQ(&c.link(2, 8), &c.inter_node);
  std::ofstream(path) << valid << R"(, "colour": "red"})";
  try {
    read_cluster(path);
    FAIL();
  } catch (const io::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("colour"), std::string::npos) << e.what();
  }
  std::ofstream(path) << R"({"nodes": 1})";
  try {
    read_cluster(path);
    FAIL();
  } catch (const io::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("memory_gib"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace pipetrain::planner

namespace pipetrain::planner {
namespace {

// A step's terms sum to its time, each layout's own terms only: no tensor-parallel time at
// t = 1, no ring at c = 1, no ZeRO traffic in the passes below stage 2, no recompute without
// checkpointing, no transfers on one stage; and each one shows where its layout pays it.
TEST(Prediction, StepTermsSumToTheStepAndNameOnlyWhatTheLayoutPays) {
  Cluster c = ideal(8);
  c.intra_node = c.inter_node = {.bandwidth = 1e9, .latency = 1e-4};
  c.step_overhead = 1e-3;
  const Workload w(small_llama(64, 4), engine::TrainingConfig{});
  struct Case {
    Layout layout;
    bool tensor, context, zero, recompute, transfers;
    bool replicated;  // gradients averaged after the schedule: over d x c, unless ZeRO 3
  };
  // Each flag: whether the layout pays that term.
  const std::vector<Case> cases{
      {{.micro_batch = 2, .micro_batches = 2}, false, false, false, false, false, false},
      {{.parallel = {.tensor = 2}, .micro_batch = 2, .micro_batches = 2},  //
       true,
       false,
       false,
       false,
       false,
       false},
      {{.parallel = {.context = 2}, .micro_batch = 2, .micro_batches = 2},  //
       false,
       true,
       false,
       false,
       false,
       true},
      {{.parallel = {.data = 2}, .micro_batch = 2, .micro_batches = 2},  //
       false,
       false,
       false,
       false,
       false,
       true},
      {{.parallel = {.data = 2}, .micro_batch = 2, .micro_batches = 2, .zero = 3},  //
       false,
       false,
       true,
       false,
       false,
       false},
      {{.parallel = {.pipe = 2}, .micro_batch = 2, .micro_batches = 4, .checkpointing = true},
       false,
       false,
       false,
       true,
       true,
       false},
  };
  for (const Case& k : cases) {
    const Prediction p = predict(w, c, k.layout);
    const StepTerms& t = p.terms;
    EXPECT_NEAR(t.sum(), p.step_seconds, 1e-9 * p.step_seconds);
    for (const double term :
         {t.compute, t.tensor_parallel, t.context, t.expert, t.zero, t.recompute, t.pipe_transfers,
          t.bubble, t.data_parallel, t.optimizer, t.overhead})
      EXPECT_GE(term, 0);
    EXPECT_GT(t.compute, 0);
    EXPECT_EQ(t.tensor_parallel > 0, k.tensor);
    EXPECT_EQ(t.context > 0, k.context);
    EXPECT_EQ(t.zero > 0, k.zero);
    EXPECT_EQ(t.recompute > 0, k.recompute);
    EXPECT_EQ(t.pipe_transfers > 0, k.transfers);
    EXPECT_EQ(t.expert, 0);
    EXPECT_EQ(t.data_parallel > 0, k.replicated) << t.data_parallel;
  }
}

}  // namespace
}  // namespace pipetrain::planner
