// 3D parallelism: pipe x data x model grids train the GPT to the same per-step losses
// and full weights as one process (fp32, CPU). Run with 2, 4 and 8 ranks, covering
// (pipe, data, model) = (1,1,2); (2,1,2), (1,2,2) and (1,1,4); (2,2,2) and (2,1,4). Every
// case trains twice, with and without partitioned stage transfers, which must agree
// exactly while moving 1/model of the bytes. With PIPETRAIN_TEST_DEVICE=cuda the engine
// runs on the GPU against the same CPU reference to 1e-4 (label gpu; with
// PIPETRAIN_EMULATED_HOSTS=1 the model group's collectives and the shares' all-gathers take
// NCCL); skipped without a GPU.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdlib>

#include "../engine/reference_training.h"
#include "device/cuda.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/expert_parallel/all_to_all.h"
#include "pipetrain/tensor_parallel/shard.h"

namespace pipetrain::tensor_parallel {
namespace {

using namespace pipetrain::testing;

bool on_gpu() {
  const char* device = std::getenv("PIPETRAIN_TEST_DEVICE");
  return device && std::string(device) == "cuda";
}

double tolerance() {
  return on_gpu() ? 1e-4 : 1e-5;
}

struct TrainedRun {
  std::vector<double> losses;
  double eval_loss = 0;
  int64_t p2p_bytes = 0;
  int64_t optimizer_bytes = 0;                // optimizer state and separate masters on this rank
  std::map<std::string, at::Tensor> weights;  // whole: shards joined over the group
};

TrainedRun train(const Case& c, const std::shared_ptr<topology::Grid>& grid, bool partitioned,
                 const std::shared_ptr<data::TensorDataset>& samples, int zero_stage = 0,
                 schedule::Kind schedule = schedule::Kind::k1F1B, int chunks = 1,
                 bool sequence_parallel = false) {
  engine::TrainingConfig config = training_config(c);
  config.pipeline.schedule.kind = schedule;
  config.pipeline.partitioned_transfers = partitioned;
  config.zero.stage = zero_stage;
  config.zero.reduce_bucket_size = 1000;  // several reduce-scatter rounds
  config.device = on_gpu() ? device::DeviceKind::kCuda : device::DeviceKind::kCpu;
  // The model's layers take the job's model group (NCCL where its ranks hold GPUs of their own).
  auto comms = std::make_shared<groups::Communicators>(grid, config.device, comm::Seconds(0));
  Group group = comms->tensor_group();
  group.sequence_parallel = sequence_parallel;
  // Expert parallelism where the grid has it: experts split over its expert group.
  const expert_parallel::Group experts{grid->expert_parallel_size() > 1
                                           ? grid->expert_comm()
                                           : std::shared_ptr<comm::MpiCommunicator>()};
  const auto model = models::make_builtin_model(
      model_config(c.model), group, context_parallel::Group{grid->context_comm()}, experts);
  auto module = std::make_shared<module::PipelineModule>(
      model.layers, model.loss,
      module::PipelineModuleOptions{.stages = grid->pipe_parallel_size(),
                                    .stage_id = grid->stage_id(),
                                    .chunks = chunks,
                                    .placement = config.pipeline.schedule.placement(),
                                    .seed = static_cast<uint64_t>(config.seed),
                                    .activation_checkpoint_interval = c.checkpoint_interval,
                                    .lora = lora_config(c.model)});
  engine::PipelineEngine engine(module, comms, config);
  // Only the first rank of the context x model group reads; the others get its micro-batches.
  data::DataLoader loader(samples, kMicroBatchSize, grid->data_parallel_size(),
                          grid->data_parallel_id());
  engine::MicroBatchSource* data = grid->sample_comm()->rank() == 0 ? &loader : nullptr;
  TrainedRun run;
  for (int step = 0; step < kSteps; ++step) run.losses.push_back(engine.train_batch(data));
  run.eval_loss = engine.eval_batch(data).loss;
  run.p2p_bytes = engine.p2p_bytes();
  run.optimizer_bytes = engine.optimizer_state_bytes();
  const auto layouts = module->shard_layouts();
  // Under ZeRO stage 3 the parameters hold no values between steps: the fp32 masters do.
  const auto masters = engine.layer_gathering() ? engine.whole_optimizer_state()
                                                : std::vector<optim::ParameterState>{};
  const auto named = module->named_parameters();
  for (std::size_t i = 0; i < named.size(); ++i) {
    const auto& [name, tensor] = named[i];
    const auto layout = layouts.find(name);
    const at::Tensor local = (masters.empty() ? tensor : masters[i].master).detach().cpu();
    const auto& holders = layout != layouts.end() && layout->second.group == ShardGroup::kExperts
                              ? grid->expert_comm()
                              : grid->tensor_comm();
    run.weights[name] =
        layout == layouts.end() ? local : join_shards(holders->all_gather(local), layout->second);
  }
  return run;
}

void expect_matches(const TrainedRun& run, const Reference& reference) {
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(run.losses[step], reference.losses[step],
                tolerance() * std::abs(reference.losses[step]))
        << "step " << step;
  }
  EXPECT_NEAR(run.eval_loss, reference.eval_loss, tolerance() * std::abs(reference.eval_loss));
  EXPECT_FALSE(run.weights.empty());
  for (const auto& [name, tensor] : run.weights) {
    const at::Tensor& expected = reference.weights.at(name);
    ASSERT_EQ(tensor.sizes(), expected.sizes()) << name;
    EXPECT_TRUE(at::allclose(tensor, expected, tolerance(), tolerance() / 10))
        << name << " differs by " << (tensor - expected).abs().max().item<double>();
  }
}

struct Shape {
  int pipe, data, model;
};

TEST(TensorParallelEquivalence, EveryGridShapeOfThisWorldMatchesOneProcess) {
  auto world = comm::MpiCommunicator::world();
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  std::vector<Shape> shapes;
  for (const Shape& s : {Shape{1, 1, 2}, Shape{2, 1, 2}, Shape{1, 2, 2}, Shape{2, 2, 2},
                         Shape{1, 1, 4}, Shape{2, 1, 4}}) {
    if (s.pipe * s.data * s.model == world->size()) shapes.push_back(s);
  }
  ASSERT_FALSE(shapes.empty());
  for (const auto& [pipe, data, model] : shapes) {
    auto grid = std::make_shared<topology::Grid>(
        topology::pipe_model_data_parallel_topology(pipe, data, model), world);
    const std::vector<Case> cases =
        model == 2
            ? std::vector<Case>{{"gpt", 1, 0, 0.0},         {"gpt", 4, 0, 0.05},
                                {"gpt-untied", 2, 1, 0.0},  {"gpt", 2, 2, 0.05},
                                {"llama", 2, 0, 0.05},      {"llama-tied", 4, 1, 0.0},
                                {"qwen2-tied", 2, 0, 0.05}, {"qwen3", 4, 1, 0.0},
                                {"mistral", 2, 0, 0.0},     {"mixtral-capacity-shared", 2, 1, 0.05},
                                {"qwen3moe", 2, 0, 0.0},    {"qwen2-tied-lora", 4, 1, 0.05},
                                {"gemma3-tied", 2, 1, 0.05}}
            : std::vector<Case>{{"gpt-heads4", 2, 0, 0.05}, {"gpt-heads4", 4, 1, 0.0}};
    for (const Case& c : cases) {
      SCOPED_TRACE("pipe " + std::to_string(pipe) + " x data " + std::to_string(data) +
                   " x model " + std::to_string(model) + ": " + name(c));
      const auto samples = dataset(c, data);
      const Reference reference = reference_run(c, data, samples);
      const TrainedRun run = train(c, grid, /*partitioned=*/true, samples);
      expect_matches(run, reference);

      // The same training with whole tensors sent: the same numbers, twice the bytes.
      const TrainedRun whole = train(c, grid, /*partitioned=*/false, samples);
      EXPECT_EQ(whole.losses, run.losses);
      for (const auto& [name, tensor] : whole.weights)
        EXPECT_TRUE(at::equal(tensor, run.weights.at(name))) << name;
      if (pipe > 1) {
        EXPECT_GT(run.p2p_bytes, 0);
        EXPECT_EQ(whole.p2p_bytes, model * run.p2p_bytes);
      } else {
        EXPECT_EQ(whole.p2p_bytes, 0);
        EXPECT_EQ(run.p2p_bytes, 0);
      }
    }
  }
}

// Experts split over expert groups of data-parallel ranks beside tensor parallelism for the
// dense parts (and the shared expert): pipe 1 x data 2 x model 2 with expert 2.
TEST(TensorParallelEquivalence, ExpertsSplitBesideTheModelGroupMatchOneProcess) {
  auto world = comm::MpiCommunicator::world();
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  if (world->size() != 4) GTEST_SKIP() << "at 4 ranks";
  const int pipe = 1;
  auto grid = std::make_shared<topology::Grid>(
      topology::pipe_model_data_parallel_topology(pipe, 2, 2), world, /*expert_parallel=*/2);
  ASSERT_EQ(grid->expert_parallel_size(), 2);
  for (const Case& c : {Case{"mixtral-capacity-shared", 2, 1, 0.05}, Case{"mixtral", 4, 0, 0.0}}) {
    SCOPED_TRACE("pipe " + std::to_string(pipe) + " x data 2 x model 2, expert 2: " + name(c));
    const auto samples = dataset(c, 2);
    expect_matches(train(c, grid, /*partitioned=*/true, samples), reference_run(c, 2, samples));
  }
}

// The schedules after ZB-H1 at pipe 2 x model 2: the same numbers as one process; the V's
// turn stays on its rank (no bytes), every other transfer moves 1/model of its bytes.
TEST(TensorParallelEquivalence, NewSchedulesAtPipeTwoModelTwoMatchOneProcess) {
  auto world = comm::MpiCommunicator::world();
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  if (world->size() != 4) GTEST_SKIP() << "pipe 2 x model 2 needs 4 ranks";
  auto grid =
      std::make_shared<topology::Grid>(topology::pipe_model_data_parallel_topology(2, 1, 2), world);
  for (const auto& [schedule, chunks] :
       std::vector<std::pair<schedule::Kind, int>>{{schedule::Kind::kZbH2, 1},
                                                   {schedule::Kind::kInterleavedZb, 2},
                                                   {schedule::Kind::kLoopedBfs, 2},
                                                   {schedule::Kind::kZbv, 2},
                                                   {schedule::Kind::kDualPipeV, 2}}) {
    for (const Case& c : {Case{"gpt-deep", 4, 0, 0.05}, Case{"llama-tied-deep", 4, 1, 0.0}}) {
      SCOPED_TRACE(std::string(schedule::name(schedule)) + ": " + name(c));
      const auto samples = dataset(c, 1);
      const Reference reference = reference_run(c, 1, samples);
      const TrainedRun run = train(c, grid, /*partitioned=*/true, samples, 0, schedule, chunks);
      expect_matches(run, reference);
      const TrainedRun whole = train(c, grid, /*partitioned=*/false, samples, 0, schedule, chunks);
      EXPECT_EQ(whole.losses, run.losses);
      EXPECT_GT(run.p2p_bytes, 0);
      EXPECT_EQ(whole.p2p_bytes, 2 * run.p2p_bytes);
    }
  }
}

// ZeRO stages 1 to 3 with tensor parallelism: each model-parallel rank's data-parallel
// group shards its own slices; the same losses and weights as one process.
TEST(TensorParallelEquivalence, ZeroStagesWithModelParallelMatchOneProcess) {
  auto world = comm::MpiCommunicator::world();
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  std::vector<Shape> shapes;
  for (const Shape& s : {Shape{1, 2, 2}, Shape{2, 2, 2}, Shape{1, 4, 2}}) {
    if (s.pipe * s.data * s.model == world->size()) shapes.push_back(s);
  }
  if (shapes.empty()) GTEST_SKIP() << "no data x model shape in this world";
  for (const auto& [pipe, data, model] : shapes) {
    auto grid = std::make_shared<topology::Grid>(
        topology::pipe_model_data_parallel_topology(pipe, data, model), world);
    for (const Case& c : {Case{"gpt", 2, 0, 0.05}, Case{"llama-tied", 4, 1, 0.0}}) {
      const auto samples = dataset(c, data);
      const Reference reference = reference_run(c, data, samples);
      for (int stage : {1, 2, 3}) {
        SCOPED_TRACE("pipe " + std::to_string(pipe) + " x data " + std::to_string(data) +
                     " x model " + std::to_string(model) + ", ZeRO stage " + std::to_string(stage) +
                     ": " + name(c));
        expect_matches(train(c, grid, /*partitioned=*/true, samples, stage), reference);
      }
    }
  }
}

// Sequence parallelism: the norms, dropout and residual stream split along the sequence
// over the model group, each rank sending its own slice between stages: the same numbers
// as one process, at pipe 1 and 2, with data 2, GPT and LLaMA, and under a V schedule.
TEST(TensorParallelEquivalence, SequenceParallelMatchesOneProcess) {
  auto world = comm::MpiCommunicator::world();
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  struct SequenceCase {
    Shape shape;
    Case c;
    schedule::Kind schedule = schedule::Kind::k1F1B;
    int chunks = 1;
  };
  const std::vector<SequenceCase> cases{
      {{1, 1, 2}, {"gpt", 2, 0, 0.05}},
      {{1, 1, 2}, {"llama", 2, 1, 0.0}},
      {{1, 1, 2}, {"llama-lora", 2, 1, 0.05}},
      {{2, 1, 2}, {"gemma3-tied", 4, 0, 0.05}},
      {{2, 1, 2}, {"gpt-untied", 4, 0, 0.05}},
      {{2, 1, 2}, {"llama-tied-deep", 4, 0, 0.0}, schedule::Kind::kZbv, 2},
      {{1, 1, 4}, {"gpt-heads4-ctx8", 2, 1, 0.05}},
      {{2, 2, 2}, {"llama-tied", 2, 0, 0.05}},
      {{1, 1, 2}, {"qwen3", 2, 1, 0.0}},
      {{2, 1, 2}, {"qwen2-tied", 4, 0, 0.05}},
      // Packed documents.
      {{1, 1, 2}, {"gpt-packed", 2, 0, 0.05}},
      {{2, 1, 2}, {"llama-packed", 4, 0, 0.0}},
      {{1, 1, 4}, {"gpt-heads4-ctx8-packed", 2, 0, 0.0}},
  };
  int ran = 0;
  for (const SequenceCase& s : cases) {
    const auto& [pipe, data, model] = s.shape;
    if (pipe * data * model != world->size()) continue;
    auto grid = std::make_shared<topology::Grid>(
        topology::pipe_model_data_parallel_topology(pipe, data, model), world);
    SCOPED_TRACE("sequence parallel, pipe " + std::to_string(pipe) + " x data " +
                 std::to_string(data) + " x model " + std::to_string(model) + ", " +
                 std::string(schedule::name(s.schedule)) + ": " + name(s.c));
    const auto samples = dataset(s.c, data);
    const TrainedRun run = train(s.c, grid, /*partitioned=*/false, samples, 0, s.schedule, s.chunks,
                                 /*sequence_parallel=*/true);
    expect_matches(run, reference_run(s.c, data, samples));
    ++ran;
  }
  ASSERT_GT(ran, 0);
}

// Context parallelism: each rank of a context group computes its load-balanced slice of
// every sequence, attention as a ring; gradients and losses averaged over data x context.
// The same numbers as one process at context 2 and 4, pipe 1 and 2, with data 2, with
// sequence parallelism, GPT and LLaMA, and every schedule at context 2.
TEST(ContextParallelEquivalence, EveryGridShapeOfThisWorldMatchesOneProcess) {
  auto world = comm::MpiCommunicator::world();
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  struct ContextCase {
    int pipe, data, context, model;
    Case c;
    bool sequence_parallel = false;
    int zero_stage = 0;
  };
  const std::vector<ContextCase> cases{
      {1, 1, 2, 1, {"gpt-ctx8", 2, 0, 0.05}},
      {1, 1, 2, 1, {"llama-ctx8", 2, 1, 0.0}},
      {1, 1, 4, 1, {"gpt-ctx8", 2, 0, 0.0}},
      {1, 1, 4, 1, {"llama-tied-ctx8", 2, 0, 0.05}},
      {2, 1, 2, 1, {"gpt-untied-ctx8", 4, 1, 0.0}},
      {2, 1, 2, 1, {"llama-tied-ctx8", 4, 0, 0.05}},
      {1, 2, 2, 1, {"gpt-ctx8", 2, 0, 0.05}, false, 1},
      {1, 2, 2, 1, {"llama-tied-ctx8", 2, 1, 0.05}, false, 3},
      {1, 1, 2, 1, {"qwen3-ctx8", 2, 0, 0.05}},
      {1, 1, 2, 2, {"qwen3-ctx8", 2, 1, 0.0}, true},
      {1, 1, 2, 2, {"gpt-ctx8", 2, 0, 0.0}, true, 3},
      {1, 1, 2, 2, {"llama-ctx8", 2, 0, 0.05}, true},
      {2, 2, 2, 1, {"llama-ctx8", 2, 0, 0.05}},
      {2, 1, 4, 1, {"gpt-ctx8", 4, 1, 0.05}},
      {2, 1, 2, 2, {"gpt-ctx8", 4, 0, 0.0}, true},
      // Packed documents: ring attention skips what the documents' masks empty.
      {1, 1, 2, 1, {"gpt-ctx8-packed", 2, 0, 0.05}},
      {2, 1, 2, 1, {"llama-tied-ctx8-packed", 4, 1, 0.0}},
      {1, 1, 4, 1, {"llama-ctx8-packed", 2, 0, 0.0}},
      {1, 1, 2, 2, {"gpt-ctx8-packed", 2, 0, 0.05}, true},
      {2, 2, 2, 1, {"gpt-untied-ctx8-packed", 2, 0, 0.0}},
  };
  int ran = 0;
  for (const ContextCase& k : cases) {
    if (k.pipe * k.data * k.context * k.model != world->size()) continue;
    auto grid = std::make_shared<topology::Grid>(
        topology::pipe_data_context_model_topology(k.pipe, k.data, k.context, k.model), world);
    SCOPED_TRACE("pipe " + std::to_string(k.pipe) + " x data " + std::to_string(k.data) +
                 " x context " + std::to_string(k.context) + " x model " + std::to_string(k.model) +
                 (k.sequence_parallel ? " (sequence parallel)" : "") + ", ZeRO " +
                 std::to_string(k.zero_stage) + ": " + name(k.c));
    const auto samples = dataset(k.c, k.data);
    const TrainedRun run = train(k.c, grid, /*partitioned=*/!k.sequence_parallel, samples,
                                 k.zero_stage, schedule::Kind::k1F1B, 1, k.sequence_parallel);
    expect_matches(run, reference_run(k.c, k.data, samples));
    ++ran;
  }
  ASSERT_GT(ran, 0);
}

TEST(ContextParallelEquivalence, EveryScheduleAtContextTwoMatchesOneProcess) {
  auto world = comm::MpiCommunicator::world();
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  if (world->size() != 4) GTEST_SKIP() << "pipe 2 x context 2 needs 4 ranks";
  auto grid = std::make_shared<topology::Grid>(
      topology::pipe_data_context_model_topology(2, 1, 2, 1), world);
  const Case c{"llama-tied-ctx8-deep", 4, 0, 0.0};
  const auto samples = dataset(c, 1);
  const Reference reference = reference_run(c, 1, samples);
  for (const auto& [schedule, chunks] :
       std::vector<std::pair<schedule::Kind, int>>{{schedule::Kind::k1F1B, 1},
                                                   {schedule::Kind::kGpipe, 1},
                                                   {schedule::Kind::kInterleaved, 2},
                                                   {schedule::Kind::kZbH1, 1},
                                                   {schedule::Kind::kZbH2, 1},
                                                   {schedule::Kind::kInterleavedZb, 2},
                                                   {schedule::Kind::kLoopedBfs, 2},
                                                   {schedule::Kind::kZbv, 2},
                                                   {schedule::Kind::kDualPipeV, 2}}) {
    SCOPED_TRACE(std::string(schedule::name(schedule)) + ": " + name(c));
    expect_matches(train(c, grid, /*partitioned=*/true, samples, 0, schedule, chunks), reference);
  }
}

}  // namespace
}  // namespace pipetrain::tensor_parallel
