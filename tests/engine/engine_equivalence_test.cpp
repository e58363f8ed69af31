// The core test: pipeline x data parallel training gives the same per-step losses and
// final weights as a plain single-process LibTorch loop over the same data (fp32, CPU).
// Run with 1, 2 and 4 ranks; every pipe x data shape of that world size is covered.
// With PIPETRAIN_TEST_DEVICE=cuda the engine runs on the GPU (ranks sharing one GPU talk
// over MPI with host staging) against the same CPU reference, to 1e-4 relative: GPU
// kernels sum in other orders (TF32 stays off, LibTorch's default), and the optimizers
// step with ATen's fused kernels there. Bf16.* trains in bf16 against the same fp32
// reference, within bf16's rounding.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "data_parallel/gradient_buckets.h"
#include "device/cuda.h"
#include "device/emulated_hosts.h"
#include "optim/optimizer_state.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/schedule/schedule.h"
#include "pipetrain/schedule/schedule_file.h"
#include "reference_training.h"
#include "schedule/pair_order.h"
#include "schedule/render.h"

namespace pipetrain::engine {
namespace {

using namespace pipetrain::testing;

bool on_gpu() {
  const char* device = std::getenv("PIPETRAIN_TEST_DEVICE");
  return device && std::string(device) == "cuda";
}

// This rank's stage of the case's model, as `config` splits it over the grid's pipe (and a
// Mixtral's experts over its expert-parallel group).
// "-recompute": attention, MLPs and norms recomputed; "-recompute-act": the MLPs'
// activations and the experts.
module::RecomputeSet recompute_of(const Case& c) {
  using module::RecomputeKind;
  if (c.model.find("-recompute-act") != std::string::npos)
    return module::RecomputeSet().add(RecomputeKind::kMlpActivation).add(RecomputeKind::kExperts);
  if (c.model.find("-recompute") != std::string::npos) {
    return module::RecomputeSet()
        .add(RecomputeKind::kAttention)
        .add(RecomputeKind::kMlp)
        .add(RecomputeKind::kNorms);
  }
  return {};
}

std::shared_ptr<module::PipelineModule> stage_module(const Case& c, const topology::Grid& grid,
                                                     const TrainingConfig& config, int chunks = 1) {
  const expert_parallel::Group experts{grid.expert_parallel_size() > 1
                                           ? grid.expert_comm()
                                           : std::shared_ptr<comm::MpiCommunicator>()};
  const auto model = models::make_builtin_model(model_config(c.model), {}, {}, experts);
  return std::make_shared<module::PipelineModule>(
      model.layers, model.loss,
      module::PipelineModuleOptions{.stages = grid.pipe_parallel_size(),
                                    .stage_id = grid.stage_id(),
                                    .chunks = chunks,
                                    .placement = config.pipeline.schedule.placement(),
                                    .seed = static_cast<uint64_t>(config.seed),
                                    .activation_checkpoint_interval = c.checkpoint_interval,
                                    .recompute = recompute_of(c),
                                    .token_loss = model.token_loss,
                                    .lora = lora_config(c.model)});
}

// The reference's weight `name` as this rank of `engine` holds it: whole, or its slice of
// experts split over the expert-parallel group.
at::Tensor reference_weight(const PipelineEngine& engine, const Reference& reference,
                            const std::string& name) {
  const at::Tensor& whole = reference.weights.at(name);
  const auto layouts = engine.module().shard_layouts();
  const auto layout = layouts.find(name);
  if (layout == layouts.end() || layout->second.group != tensor_parallel::ShardGroup::kExperts)
    return whole;
  const auto& experts = *engine.grid().expert_comm();
  return tensor_parallel::take_shard(whole, layout->second, experts.rank(), experts.size());
}

// Every weight of `engine` within `tolerance` of the reference's (fp32 masters under ZeRO
// stage 3, whose parameters hold no values between steps: gathered, collective).
void expect_reference_weights(PipelineEngine& engine, const Reference& reference,
                              double tolerance) {
  const auto named = engine.module().named_parameters();
  const auto masters = engine.layer_gathering() ? engine.whole_optimizer_state()
                                                : std::vector<optim::ParameterState>{};
  for (std::size_t i = 0; i < named.size(); ++i) {
    const auto& [name, parameter] = named[i];
    EXPECT_EQ(parameter.device(), engine.device());
    const at::Tensor tensor = masters.empty() ? parameter.cpu() : masters[i].master.cpu();
    const at::Tensor expected = reference_weight(engine, reference, name);
    EXPECT_TRUE(at::allclose(tensor, expected, tolerance, tolerance / 10))
        << name << " differs by " << (tensor - expected).abs().max().item<double>();
  }
  // A frozen parameter (LoRA's base) is exactly as it was built.
  const auto frozen = engine.module().named_frozen();
  const auto layouts = engine.module().shard_layouts();
  for (const auto& [name, parameter] : frozen) {
    const auto built = reference.frozen.find(name);
    ASSERT_NE(built, reference.frozen.end()) << name << " is frozen in one process only";
    if (layouts.count(name)) continue;  // experts' slices
    EXPECT_TRUE(at::equal(parameter.cpu(), built->second)) << name << " changed";
  }
  EXPECT_EQ(frozen.empty(), reference.frozen.empty());
}

// Trains kSteps on `loader` and evaluates the next batch (returning its outputs), each
// loss and the final weights within `tolerance` of the reference.
PipelineEngine::EvalResult train_and_compare(PipelineEngine& engine, data::DataLoader& loader,
                                             const Reference& reference, double tolerance) {
  for (int step = 0; step < kSteps; ++step) {
    const double loss = engine.train_batch(&loader);
    EXPECT_NEAR(loss, reference.losses[step], tolerance * std::abs(reference.losses[step]))
        << "step " << step;
    if (!reference.grad_norms.empty()) {  // the norm clipping divides by, every part counted once
      EXPECT_NEAR(engine.last_grad_norm(), reference.grad_norms[step],
                  tolerance * reference.grad_norms[step])
          << "gradient norm, step " << step;
    }
  }
  expect_reference_weights(engine, reference, tolerance);
  const auto evaluation = engine.eval_batch(&loader, /*return_outputs=*/true);
  EXPECT_NEAR(evaluation.loss, reference.eval_loss, tolerance * std::abs(reference.eval_loss));
  return evaluation;
}

// From the second step on, every gradient bucket but those of tied tensors starts inside
// a backward pass, and none is reduced twice. Not where ranks share a GPU: there MPI copies
// through the host, which autograd's CUDA thread must not, so buckets start between passes.
void expect_buckets_started_in_backward(const PipelineEngine& engine) {
  const data_parallel::GradientBuckets* buckets = engine.gradient_buckets();
  ASSERT_NE(buckets, nullptr);
  EXPECT_EQ(buckets->reduced_again(), 0);
  if (on_gpu() && engine.data_transport() == comm::Transport::kMpi) return;
  EXPECT_GT(buckets->early_buckets(), 0);
  EXPECT_EQ(buckets->started_in_backward(), buckets->early_buckets());
}

// The file kind stands for a CSV file of ZB-H1's compute orders, written by
// `pipetrain schedule --format csv` and read back as any file would be.
std::shared_ptr<const schedule::FileSchedule> zb_h1_file(int micro_batches, int pipe) {
  const auto plan = schedule::plan_pipeline(schedule::Kind::kZbH1, {micro_batches, pipe});
  return std::make_shared<const schedule::FileSchedule>(
      schedule::parse_schedule_csv(schedule::to_csv(plan), "zb-h1.csv"));
}

schedule::PipelinePlan plan_of(schedule::Kind schedule, int micro_batches, int pipe, int chunks) {
  if (schedule == schedule::Kind::kFile)
    return schedule::plan_schedule_file(*zb_h1_file(micro_batches, pipe));
  return schedule::plan_pipeline(schedule,
                                 schedule::shape_for(schedule, micro_batches, pipe, chunks));
}

// Whether `schedule` runs `micro_batches` over `pipe` stages (its source's conditions).
bool runs(schedule::Kind schedule, int micro_batches, int pipe, int chunks) {
  if (schedule == schedule::Kind::kFile) schedule = schedule::Kind::kZbH1;
  try {
    schedule::plan_pipeline(schedule, schedule::shape_for(schedule, micro_batches, pipe, chunks));
    return true;
  } catch (const io::InputError&) {
    return false;
  }
}

// Trains one case under `schedule` on `grid` and compares it with one process; the
// engine's live activations must peak where the schedule's plan does.
void expect_case_matches_one_process(const Case& c, const std::shared_ptr<topology::Grid>& grid,
                                     schedule::Kind schedule, int chunks) {
  const int pipe = grid->pipe_parallel_size(), data = grid->data_parallel_size();
  SCOPED_TRACE("pipe " + std::to_string(pipe) + " x data " + std::to_string(data) + ": " + name(c));
  const auto samples = dataset(c, data);
  const Reference reference = reference_run(c, data, samples);
  TrainingConfig config = training_config(c);
  config.pipeline.schedule.kind = schedule;
  if (schedule == schedule::Kind::kFile)
    config.pipeline.schedule.file = zb_h1_file(c.micro_batches, pipe);
  config.ddp_bucket_size = 3000;  // several buckets (in the GPTs' 6-14 k per stage)
  config.device = on_gpu() ? device::DeviceKind::kCuda : device::DeviceKind::kCpu;
  auto module = stage_module(c, *grid, config, chunks);
  PipelineEngine engine(module, grid, config);
  const auto plan = plan_of(schedule, c.micro_batches, pipe, chunks);
  if (on_gpu() && device::visible_gpus() == 1) {
    // Ranks sharing a GPU: MPI with host staging; as emulated hosts, NCCL under every
    // schedule (over the lanes of schedule::pipe_lanes, which every plan here has).
    const bool nccl = device::emulated_hosts() && pipe > 1;
    EXPECT_EQ(engine.pipe_transports(), nccl ? "nccl (emulated hosts)" : "mpi");
  }
  data::DataLoader loader(samples, kMicroBatchSize, data, grid->data_parallel_id());
  const double tolerance = on_gpu() ? 1e-4 : 1e-5;
  const auto evaluation = train_and_compare(engine, loader, reference, tolerance);
  if (data > 1) expect_buckets_started_in_backward(engine);
  EXPECT_EQ(evaluation.outputs.size(),
            engine.holds_output() ? static_cast<std::size_t>(c.micro_batches) : 0u);
  EXPECT_EQ(engine.peak_live_activations(), schedule::peak_live(plan, grid->stage_id()));
}

// Trains every case under `schedule` (with `chunks` per stage) on every pipe x data shape
// of this world and compares with one process; the engine's live activations must peak
// where the schedule's plan does.
void expect_every_shape_matches_one_process(schedule::Kind schedule, int chunks = 1) {
  auto world = comm::MpiCommunicator::world();
  std::vector<std::pair<int, int>> shapes;  // (pipe, data)
  for (int pipe : {1, 2, 4}) {
    if (chunks > 1 && pipe == 1) continue;  // interleaving needs a pipe
    if (world->size() % pipe == 0 && world->size() / pipe <= 2)
      shapes.emplace_back(pipe, world->size() / pipe);
  }
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  if (shapes.empty()) GTEST_SKIP() << "no pipe of at least 2 stages in this world";
  std::vector<Case> cases;
  // Interleaving splits the layers into pipe x chunks parts: deeper GPTs for 4 x 2.
  const std::vector<std::string> models =
      chunks > 1 ? std::vector<std::string>{"gpt-deep", "gpt-untied-deep", "mlp"}
                 : std::vector<std::string>{"gpt", "gpt-untied", "mlp"};
  for (const std::string& model : models) {
    for (int m : {1, 2, 4, 8}) {
      cases.push_back({model, m, 0, 0.0});
      cases.push_back({model, m, m % 2 ? 1 : 2, m >= 4 ? 0.05 : 0.0});
    }
  }
  const std::string deep = chunks > 1 ? "-deep" : "";
  cases.push_back({"llama" + deep, 2, 0, 0.0});
  cases.push_back({"llama-tied" + deep, 4, 1, 0.05});
  cases.push_back({"qwen2-tied" + deep, 2, 0, 0.05});
  cases.push_back({"qwen3" + deep, 4, 1, 0.0});
  cases.push_back({"gemma3-tied" + deep, 4, 1, 0.05});
  cases.push_back({"llama-masked" + deep, 4, 1, 0.05});
  cases.push_back({"llama-tied-lora" + deep, 4, 1, 0.05});
  cases.push_back({"llama-recompute" + deep, 4, 0, 0.05});
  cases.push_back({"gpt-recompute-act" + deep, 2, 1, 0.0});
  for (const auto& [pipe, data] : shapes) {
    auto grid =
        std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(pipe, data), world);
    for (const Case& c : cases) {
      if (chunks > 1 && c.micro_batches % pipe != 0) continue;  // Megatron's restriction
      if (c.model == "mlp" && pipe * chunks > 4) continue;      // 5 layers
      expect_case_matches_one_process(c, grid, schedule, chunks);
    }
  }
}

// What a checkpoint save gathers one tensor at a time: on the first replica each
// parameter's whole master and state, as whole_optimizer_state joins them on every rank;
// under ZeRO, elsewhere no per-element state (it was sent, not received).
void expect_gathered_state_is_whole_on_the_first_replica(PipelineEngine& engine,
                                                         const topology::Grid& grid, bool zero) {
  const auto whole = engine.whole_optimizer_state();
  for (std::size_t i = 0; i < whole.size(); ++i) {
    const optim::ParameterState gathered = engine.gathered_optimizer_state(i);
    if (grid.data_parallel_id() != 0 && zero) {
      for (const auto& [key, value] : gathered.optimizer_state)
        EXPECT_FALSE(optim::is_per_element(key)) << key << " of parameter " << i;
      continue;
    }
    // EXPECT, not ASSERT: returning early would leave the other replicas sending.
    EXPECT_TRUE(gathered.master.defined() && at::equal(gathered.master, whole[i].master))
        << "master of parameter " << i;
    EXPECT_EQ(gathered.optimizer_state.size(), whole[i].optimizer_state.size()) << i;
    if (gathered.optimizer_state.size() != whole[i].optimizer_state.size()) continue;
    for (std::size_t k = 0; k < gathered.optimizer_state.size(); ++k) {
      EXPECT_EQ(gathered.optimizer_state[k].first, whole[i].optimizer_state[k].first);
      EXPECT_TRUE(at::equal(gathered.optimizer_state[k].second, whole[i].optimizer_state[k].second))
          << gathered.optimizer_state[k].first << " of parameter " << i;
    }
  }
}

// ZeRO stages 1 to 3 at every pipe x data shape of this world with data-parallel ranks
// (data 4 too), under every schedule: the same losses and weights as one process, with
// clipping and, for the MLP, AdamW with weight decay; buckets of 1000 elements, reduce-
// scattered during backward; the optimizer state each rank holds falls by the
// data-parallel size (up to each bucket's padding).
void expect_zero_matches_one_process(schedule::Kind schedule, int chunks = 1) {
  auto world = comm::MpiCommunicator::world();
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  std::vector<std::pair<int, int>> shapes;  // (pipe, data)
  for (int pipe : {1, 2}) {
    if (chunks > 1 && pipe == 1) continue;  // interleaving needs a pipe
    if (world->size() % pipe == 0 && world->size() / pipe >= 2)
      shapes.emplace_back(pipe, world->size() / pipe);
  }
  if (shapes.empty()) GTEST_SKIP() << "no data-parallel ranks (and pipe) in this world";
  const double tolerance = on_gpu() ? 1e-4 : 1e-5;
  const std::string deep = chunks > 1 ? "-deep" : "";
  const std::vector<Case> cases = {
      {"gpt" + deep, 2, 0, 0.05},        {"gpt-untied" + deep, 4, 2, 0.0},
      {"qwen2-tied" + deep, 2, 0, 0.05}, {"qwen2-tied-lora" + deep, 4, 1, 0.05},
      {"mlp", 2, 0, 0.05, 0.01},         {"mlp", 4, 1, 0.0, 0.1}};
  for (const auto& [pipe, data] : shapes) {
    auto grid =
        std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(pipe, data), world);
    for (const Case& c : cases) {
      if (!runs(schedule, c.micro_batches, pipe, chunks)) continue;  // e.g. dualpipev's m >= 2p
      const auto samples = dataset(c, data);
      const Reference reference = reference_run(c, data, samples);
      int64_t unsharded_bytes = 0;
      // Stage 3 twice: layers resharded after forward (prefetch 1), and kept for the step.
      for (const auto& [stage, reshard] :
           {std::pair{0, true}, std::pair{1, true}, std::pair{2, true}, std::pair{3, true},
            std::pair{3, false}}) {
        SCOPED_TRACE("pipe " + std::to_string(pipe) + " x data " + std::to_string(data) +
                     ", ZeRO stage " + std::to_string(stage) +
                     (reshard ? "" : " (kept after forward)") + ": " + name(c));
        engine::TrainingConfig config = training_config(c);
        config.pipeline.schedule.kind = schedule;
        config.zero.stage = stage;
        config.zero.reshard_after_forward = reshard;
        config.zero.reduce_bucket_size = 1000;  // several reduce-scatter rounds
        config.zero.allgather_bucket_size = 700;
        config.device = on_gpu() ? device::DeviceKind::kCuda : device::DeviceKind::kCpu;
        auto module = stage_module(c, *grid, config, chunks);
        PipelineEngine engine(module, grid, config);
        data::DataLoader loader(samples, kMicroBatchSize, data, grid->data_parallel_id());
        train_and_compare(engine, loader, reference, tolerance);
        expect_gathered_state_is_whole_on_the_first_replica(engine, *grid, stage > 0);
        if (stage < 2) expect_buckets_started_in_backward(engine);  // 2, 3: after each pass
        const int64_t bytes = engine.optimizer_state_bytes();
        if (stage == 0) {
          unsharded_bytes = bytes;
        } else {
          // Each bucket's padding: at most data - 1 elements per state (and per master copy).
          int64_t elements = 0;
          for (const auto& p : module->parameters()) elements += p.numel();
          const int64_t states = unsharded_bytes / (4 * std::max<int64_t>(elements, 1));
          const int64_t buckets = engine.gradient_buckets()->buckets();
          EXPECT_LE(bytes, unsharded_bytes / data + (states + 1) * 4 * (data - 1) * buckets);
          EXPECT_GT(bytes, 0);
        }
      }
    }
  }
}

// How far this rank's fp32 masters moved from the reference's start, against how far the
// reference's weights moved: |engine's update - reference's update| / |reference's update|
// over all of the rank's parameters, and the largest relative loss difference.
struct Bf16Gap {
  double update = 0;
  double loss = 0;
};

// Each parameter's fp32 master by name (under ZeRO joined from the shards: collective).
std::map<std::string, at::Tensor> masters(PipelineEngine& engine, bool zero) {
  std::map<std::string, at::Tensor> found;
  const auto named = engine.module().named_parameters();
  const auto whole = zero ? engine.whole_optimizer_state() : std::vector<optim::ParameterState>{};
  for (std::size_t i = 0; i < named.size(); ++i) {
    const auto& [name, parameter] = named[i];
    found[name] = (zero ? whole[i].master : engine.master_of(parameter)).cpu().clone();
  }
  return found;
}

Bf16Gap bf16_gap(PipelineEngine& engine, data::DataLoader& loader, const Reference& reference,
                 bool zero) {
  // The masters start from the bf16 weights (as DeepSpeed's and Megatron's do), off the
  // reference's fp32 start by up to 2^-9 relative: more than a clipped step moves them.
  const auto starts = masters(engine, zero);
  Bf16Gap gap;
  for (int step = 0; step < kSteps; ++step) {
    const double loss = engine.train_batch(&loader);
    gap.loss = std::max(gap.loss, std::abs(loss / reference.losses[step] - 1));
  }
  double miss = 0, moved = 0;
  const auto ends = masters(engine, zero);
  for (const auto& [name, parameter] : engine.module().named_parameters()) {
    EXPECT_EQ(parameter.scalar_type(), at::kBFloat16) << name;
    const at::Tensor update = ends.at(name) - starts.at(name);
    const at::Tensor expected = reference.weights.at(name) - reference.initial_weights.at(name);
    miss += (update - expected).square().sum().item<double>();
    moved += expected.square().sum().item<double>();
  }
  gap.update = std::sqrt(miss / moved);
  return gap;
}

// bf16 (weights, activations and gradients in bf16; fp32 masters, optimizer and data-
// parallel reduction) at every pipe x data shape of this world, on the test's device,
// against the fp32 reference, for GPT and LLaMA with SGD and momentum (an update in
// proportion to the gradient; Adam would divide the GPT key bias's rounding noise by its
// own size, see reference_training.h). bf16 keeps 8 significant bits: every stored weight,
// activation and gradient is off by up to 2^-9 = 0.2% relative, independently per element,
// so a gradient summed over tokens and micro-batches errs by well under 1% and a loss (a
// mean over hundreds of token losses) by far less. Measured on the CPU at 1, 2 and 4 ranks:
// updates within 0.35-0.77%, losses within 0.003%. The bounds (3% and 0.05%) leave room for
// the GPU's summation orders and still catch a wrong reduction: a gradient summed instead
// of averaged over replicas (the unclipped GPT's update doubles: 100% off) or a tied
// embedding's sum left out.
TEST(Bf16, EveryGridShapeUpdatesAsTheFp32Reference) {
  auto world = comm::MpiCommunicator::world();
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  const std::vector<Case> cases = {{"gpt", 4, 0, 0.0},
                                   {"gpt-untied", 2, 1, 0.05},
                                   {"llama-tied", 4, 1, 0.05},
                                   {"gemma3-tied", 2, 0, 0.0}};
  for (int pipe : {1, 2, 4}) {
    if (world->size() % pipe != 0 || world->size() / pipe > 2) continue;
    const int data = world->size() / pipe;
    auto grid =
        std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(pipe, data), world);
    for (const Case& c : cases) {
      // ZeRO stage 3 too where there are replicas: bf16 pieces, fp32 master pieces.
      for (int zero : {0, 3}) {
        if (zero > 0 && data == 1) continue;
        SCOPED_TRACE("pipe " + std::to_string(pipe) + " x data " + std::to_string(data) +
                     ", ZeRO " + std::to_string(zero) + ": " + name(c));
        const auto samples = dataset(c, data);
        const Reference reference = reference_run(c, data, samples);
        TrainingConfig config = training_config(c);
        config.precision.dtype = optim::Precision::kBf16;
        config.zero.stage = zero;
        config.device = on_gpu() ? device::DeviceKind::kCuda : device::DeviceKind::kCpu;
        auto module = stage_module(c, *grid, config);
        PipelineEngine engine(module, grid, config);
        data::DataLoader loader(samples, kMicroBatchSize, data, grid->data_parallel_id());
        const Bf16Gap gap = bf16_gap(engine, loader, reference, zero > 0);
        std::printf(
            "bf16 %s, pipe %d x data %d, ZeRO %d, stage %d: update within %.4f, loss within "
            "%.5f\n",
            name(c).c_str(), pipe, data, zero, grid->stage_id(), gap.update, gap.loss);
        EXPECT_LT(gap.update, 0.03);
        EXPECT_LT(gap.loss, 5e-4);
      }
    }
  }
}

// The schedules after ZB-H1, leaner than the four before them (each adds a minute at 4
// ranks): at pipe 2 and 4 (x data 2 where the world allows), m 4, 8 and the smallest m the
// schedule takes, tied and untied GPTs, a tied LLaMA with activation checkpointing and an
// MLP; the same losses, weights, eval loss and peak live activations as planned.
void expect_new_schedule_matches_one_process(schedule::Kind schedule, int chunks) {
  auto world = comm::MpiCommunicator::world();
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  std::vector<std::pair<int, int>> shapes;  // (pipe, data)
  for (int pipe : {2, 4}) {
    if (world->size() % pipe == 0 && world->size() / pipe <= 2)
      shapes.emplace_back(pipe, world->size() / pipe);
  }
  if (shapes.empty()) GTEST_SKIP() << "no pipe of at least 2 stages in this world";
  for (const auto& [pipe, data] : shapes) {
    int smallest = 1;
    while (!runs(schedule, smallest, pipe, chunks)) ++smallest;
    const bool deep = chunks > 1;  // the layers split into pipe x chunks parts
    const std::string gpt = deep ? "gpt-deep" : "gpt",
                      untied = deep ? "gpt-untied-deep" : "gpt-untied";
    std::vector<Case> cases = {
        {gpt, smallest, 0, 0.0},
        {untied, 8, 2, 0.05},
        {deep ? "llama-tied-deep" : "llama-tied", 4, 1, 0.05},
        {deep ? "qwen3-deep" : "qwen3", 4, 0, 0.0},
        {deep ? "llama-masked-recompute-deep" : "llama-masked-recompute", 4, 0, 0.05},
        {deep ? "llama-lora-deep" : "llama-lora", 4, 0, 0.05}};
    if (smallest != 4) cases.push_back({gpt, 4, 1, 0.0});
    if (pipe * chunks <= 4) cases.push_back({"mlp", 8, 0, 0.05});  // 5 layers
    auto grid =
        std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(pipe, data), world);
    for (const Case& c : cases) {
      if (runs(schedule, c.micro_batches, pipe, chunks))
        expect_case_matches_one_process(c, grid, schedule, chunks);
    }
  }
}

// Mixtures of experts under every schedule at pipe 2 (x data 2 where the world allows):
// each block's auxiliary losses added on the stage that computes it and scaled as the
// loss, dropless with activation checkpointing and clipping, and with a capacity factor
// that drops tokens; ZeRO 1 and 2 on the first schedule.
TEST(Experts, EveryScheduleMatchesOneProcess) {
  auto world = comm::MpiCommunicator::world();
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  if (world->size() % 2 != 0 || world->size() > 4) GTEST_SKIP() << "pipe 2 x data 1 or 2";
  const int pipe = 2, data = world->size() / 2;
  auto grid =
      std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(pipe, data), world);
  const std::vector<std::pair<schedule::Kind, int>> schedules = {
      {schedule::Kind::k1F1B, 1},        {schedule::Kind::kGpipe, 1},
      {schedule::Kind::kInterleaved, 2}, {schedule::Kind::kZbH1, 1},
      {schedule::Kind::kZbH2, 1},        {schedule::Kind::kInterleavedZb, 2},
      {schedule::Kind::kLoopedBfs, 2},   {schedule::Kind::kZbv, 2},
      {schedule::Kind::kDualPipeV, 2}};
  for (const auto& [schedule, chunks] : schedules) {
    SCOPED_TRACE(std::string(schedule::name(schedule)));
    const std::string deep = chunks > 1 ? "-deep" : "";
    for (const Case& c :
         {Case{"mixtral" + deep, 4, 1, 0.05}, Case{"mixtral-capacity-shared" + deep, 4, 0, 0.0},
          Case{"qwen3moe" + deep, 4, 0, 0.05}, Case{"mixtral-recompute-act" + deep, 2, 0, 0.0}}) {
      if (runs(schedule, c.micro_batches, pipe, chunks))
        expect_case_matches_one_process(c, grid, schedule, chunks);
    }
  }
  if (data == 1) return;
  const Case c{"mixtral-capacity", 4, 1, 0.05};
  const auto samples = dataset(c, data);
  const Reference reference = reference_run(c, data, samples);
  for (int stage : {1, 2}) {
    SCOPED_TRACE("ZeRO stage " + std::to_string(stage));
    engine::TrainingConfig config = training_config(c);
    config.zero.stage = stage;
    config.zero.reduce_bucket_size = 1000;
    config.device = on_gpu() ? device::DeviceKind::kCuda : device::DeviceKind::kCpu;
    auto module = stage_module(c, *grid, config);
    PipelineEngine engine(module, grid, config);
    data::DataLoader loader(samples, kMicroBatchSize, data, grid->data_parallel_id());
    train_and_compare(engine, loader, reference, on_gpu() ? 1e-4 : 1e-5);
  }
}

// Each parameter of `engine`'s module against the reference's (whole, or this rank's slice
// of a split one), within 1e-5.
// Expert parallelism: groups of 2 or 4 data-parallel ranks split the Mixtral's experts,
// tokens travelling to their experts' ranks and back. The same losses, weights and eval
// loss as one process holding every expert, at pipe 1 and 2, dropless with checkpointing
// and clipping, and with a capacity, a sigmoid router and a shared expert. Then a
// checkpoint saved with experts split loads at expert size 1 with every expert whole, and
// one saved there loads split again.
TEST(Experts, ExpertParallelMatchesOneProcess) {
  auto world = comm::MpiCommunicator::world();
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  struct Shape {
    int pipe, data, experts;
    schedule::Kind schedule;
    int chunks;
    bool every_case = true;  // else the dropless Mixtral alone (kept lean)
    int zero = 0;            // ZeRO stage: the dense part sharded, the experts over their holders
  };
  std::vector<Shape> shapes;
  if (world->size() == 2) {
    shapes = {{1, 2, 2, schedule::Kind::k1F1B, 1},
              {1, 2, 2, schedule::Kind::k1F1B, 1, true, 1},
              {1, 2, 2, schedule::Kind::k1F1B, 1, false, 3}};
  }
  if (world->size() == 4) {
    shapes = {{1, 4, 2, schedule::Kind::k1F1B, 1},
              {1, 4, 4, schedule::Kind::k1F1B, 1},
              {1, 4, 2, schedule::Kind::k1F1B, 1, false, 2},
              {1, 4, 2, schedule::Kind::k1F1B, 1, false, 3},
              {2, 2, 2, schedule::Kind::k1F1B, 1},
              {2, 2, 2, schedule::Kind::k1F1B, 1, true, 1},
              {2, 2, 2, schedule::Kind::kZbH1, 1},
              {2, 2, 2, schedule::Kind::kZbv, 2},
              {2, 2, 2, schedule::Kind::kGpipe, 1, false},
              {2, 2, 2, schedule::Kind::kInterleaved, 2, false},
              {2, 2, 2, schedule::Kind::kZbH2, 1, false},
              {2, 2, 2, schedule::Kind::kInterleavedZb, 2, false},
              {2, 2, 2, schedule::Kind::kLoopedBfs, 2, false},
              {2, 2, 2, schedule::Kind::kDualPipeV, 2, false}};
  }
  if (shapes.empty()) GTEST_SKIP() << "expert parallelism here at 2 and 4 ranks";
  const double tolerance = on_gpu() ? 1e-4 : 1e-5;
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() /
      ("pipetrain-experts-" + std::to_string(world->size()) + "-ranks");
  for (const auto& shape : shapes) {
    const std::string deep = shape.chunks > 1 ? "-deep" : "";
    for (const Case& c :
         {Case{"mixtral" + deep, 4, 1, 0.002}, Case{"mixtral-capacity-shared" + deep, 2, 0, 0.0}}) {
      if (!shape.every_case && c.model.rfind("mixtral-capacity", 0) == 0) continue;
      SCOPED_TRACE("pipe " + std::to_string(shape.pipe) + " x data " + std::to_string(shape.data) +
                   ", expert " + std::to_string(shape.experts) + ", " +
                   std::string(schedule::name(shape.schedule)) + ", ZeRO " +
                   std::to_string(shape.zero) + ": " + name(c));
      const auto samples = dataset(c, shape.data);
      const Reference reference = reference_run(c, shape.data, samples);
      auto grid = std::make_shared<topology::Grid>(
          topology::pipe_data_parallel_topology(shape.pipe, shape.data), world, shape.experts);
      ASSERT_EQ(grid->expert_parallel_size(), shape.experts);
      TrainingConfig config = training_config(c);
      config.pipeline.schedule.kind = shape.schedule;
      config.zero.stage = shape.zero;
      config.zero.reduce_bucket_size = 1000;  // several reduce-scatter rounds
      config.device = on_gpu() ? device::DeviceKind::kCuda : device::DeviceKind::kCpu;
      auto module = stage_module(c, *grid, config, shape.chunks);
      // Each MoE block's three expert tensors are split over the expert group.
      int64_t routers = 0;
      for (const auto& [name, p] : module->named_parameters())
        routers += name.size() > 11 && name.compare(name.size() - 11, 11, ".moe.router") == 0;
      int64_t experts_split = 0;
      for (const auto& [name, layout] : module->shard_layouts())
        experts_split += layout.group == tensor_parallel::ShardGroup::kExperts;
      EXPECT_EQ(experts_split, 3 * routers);
      int64_t dense_elements = 0, expert_elements = 0, tensors = 0;
      const auto layouts = module->shard_layouts();
      for (const auto& [name, p] : module->named_parameters()) {
        const auto it = layouts.find(name);
        const bool expert =
            it != layouts.end() && it->second.group == tensor_parallel::ShardGroup::kExperts;
        (expert ? expert_elements : dense_elements) += p.numel();
        ++tensors;
      }
      PipelineEngine engine(module, grid, config);
      data::DataLoader loader(samples, kMicroBatchSize, shape.data, grid->data_parallel_id());
      train_and_compare(engine, loader, reference, tolerance);
      if (shape.zero > 0) {
        // The optimizer steps this rank's share: the dense part's over the replicas, the
        // experts' over the ranks holding them (padding aside: under one bucket per tensor).
        int64_t stepped = 0;
        for (const auto& group : engine.optimizer().param_groups()) {
          for (const auto& p : group.params()) stepped += p.numel();
        }
        const int holders = shape.data / shape.experts;
        EXPECT_LE(stepped,
                  dense_elements / shape.data + expert_elements / holders + tensors * shape.data);
      }
      if (shape.schedule != schedule::Kind::k1F1B || c.micro_batches != 4) continue;
      // Saved split, loaded whole; saved whole, loaded split.
      checkpoint::save_checkpoint(engine, folder, "split");
      auto whole_grid = std::make_shared<topology::Grid>(
          topology::pipe_data_parallel_topology(shape.pipe, shape.data), world);
      PipelineEngine whole(stage_module(c, *whole_grid, config), whole_grid, config);
      checkpoint::load_checkpoint(whole, folder, "split");
      expect_reference_weights(whole, reference, tolerance);
      checkpoint::save_checkpoint(whole, folder, "whole");
      PipelineEngine split(stage_module(c, *grid, config), grid, config);
      checkpoint::load_checkpoint(split, folder, "whole");
      expect_reference_weights(split, reference, tolerance);
    }
  }
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(folder);
}

class NewSchedules : public ::testing::TestWithParam<std::pair<schedule::Kind, int>> {};

TEST_P(NewSchedules, MatchOneProcess) {
  expect_new_schedule_matches_one_process(GetParam().first, GetParam().second);
}

// ZeRO stages 1 and 2 (stage 0 for the state's size), as for the four schedules before them.
TEST_P(NewSchedules, ZeroStagesMatchOneProcess) {
  if (GetParam().first == schedule::Kind::kFile) GTEST_SKIP() << "zb-h1 runs ZeRO already";
  expect_zero_matches_one_process(GetParam().first, GetParam().second);
}

INSTANTIATE_TEST_SUITE_P(EngineEquivalence, NewSchedules,
                         ::testing::Values(std::make_pair(schedule::Kind::kZbH2, 1),
                                           std::make_pair(schedule::Kind::kInterleavedZb, 2),
                                           std::make_pair(schedule::Kind::kLoopedBfs, 2),
                                           std::make_pair(schedule::Kind::kZbv, 2),
                                           std::make_pair(schedule::Kind::kDualPipeV, 2),
                                           std::make_pair(schedule::Kind::kFile, 1)));

// Each training schedule with its chunks per stage: DeepSpeed's 1F1B (at most the stages
// ahead live), GPipe (every micro-batch live at once), interleaved 1F1B over two chunks
// (the last stage's first chunk feeds the first stage's second) and ZB-H1 (input
// gradients first, linear layers' weight gradients later).
class Schedules : public ::testing::TestWithParam<std::pair<schedule::Kind, int>> {};

TEST_P(Schedules, EveryGridShapeOfThisWorldMatchesOneProcess) {
  expect_every_shape_matches_one_process(GetParam().first, GetParam().second);
}

TEST_P(Schedules, ZeroStagesMatchOneProcess) {
  expect_zero_matches_one_process(GetParam().first, GetParam().second);
}

INSTANTIATE_TEST_SUITE_P(EngineEquivalence, Schedules,
                         ::testing::Values(std::make_pair(schedule::Kind::k1F1B, 1),
                                           std::make_pair(schedule::Kind::kGpipe, 1),
                                           std::make_pair(schedule::Kind::kInterleaved, 2),
                                           std::make_pair(schedule::Kind::kZbH1, 1)));

}  // namespace
}  // namespace pipetrain::engine
