// The engine's parts on real ranks (4: pipe 2 x data 2, or pipe 2 x model 2), each alone:
// the stage link moves tensor lists and counts their bytes, gradient synchronisation sums
// tied gradients and averages replicas (gradient buckets start during the last backward
// passes), the mixed-precision optimizer unscales, clips and steps its fp32 masters.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <thread>

#include <ATen/ATen.h>

#include "../comm/forwarding_communicator.h"
#include "autograd/linear.h"
#include "autograd/weight_grad_store.h"
#include "data_parallel/averaged_buckets.h"
#include "data_parallel/gradient_buckets.h"
#include "data_parallel/gradient_sync.h"
#include "engine/stage_link.h"
#include "optim/mixed_precision_optimizer.h"
#include "pipetrain/models/gpt/gpt.h"

namespace pipetrain::engine {
namespace {

std::shared_ptr<topology::Grid> pipe_data_grid() {
  auto world = comm::MpiCommunicator::world();
  return std::make_shared<topology::Grid>(
      topology::pipe_data_parallel_topology(2, world->size() / 2), world);
}

// A tied GPT split over two stages (the embedding and the head share "embed").
std::shared_ptr<module::PipelineModule> tied_gpt(const topology::Grid& grid) {
  const models::GptConfig config{
      .vocab_size = 16, .context = 4, .d_model = 8, .heads = 2, .layers = 2};
  return std::make_shared<module::PipelineModule>(
      models::gpt_layers(config), models::gpt_loss(),
      module::PipelineModuleOptions{.stages = 2, .stage_id = grid.stage_id(), .seed = 5});
}

// The job's communicators on the CPU (MPI throughout).
std::shared_ptr<groups::Communicators> cpu_communicators(std::shared_ptr<topology::Grid> grid) {
  return std::make_shared<groups::Communicators>(std::move(grid), device::DeviceKind::kCpu,
                                                 comm::Seconds(0));
}

// ... with the tied groups of `module` connected.
std::shared_ptr<groups::Communicators> tied_communicators(std::shared_ptr<topology::Grid> grid,
                                                          const module::PipelineModule& module) {
  auto comms = cpu_communicators(std::move(grid));
  comms->connect_tied(module);
  return comms;
}

// Every gradient filled with `value`.
void fill_grads(const module::PipelineModule& module, double value) {
  for (const auto& p : module.parameters()) p.mutable_grad() = at::full_like(p, value);
}

TEST(StageLink, MovesTensorListsBothWaysAndCountsTheirBytes) {
  const auto grid = pipe_data_grid();
  const auto comms = cpu_communicators(grid);
  comms->connect_pipe(std::nullopt);             // every payload over MPI
  StageLink link(*comms, /*partitioned=*/true);  // no model-parallel group: whole tensors
  const at::Tensor activation =
      at::arange(15, at::kFloat).reshape({3, 5}) + grid->data_parallel_id();
  const at::Tensor ids = at::arange(4, at::kLong);
  if (grid->is_first_stage()) {
    link.send({activation.requires_grad_(), ids}, 1, Channel::activations(0));
    const comm::TensorList grads = link.recv(1, Channel::gradients(0));
    ASSERT_EQ(grads.size(), 1u);
    EXPECT_TRUE(at::equal(grads[0], activation.detach() * 2));
  } else {
    comm::TensorList reuse{at::empty({3, 5}), at::empty({4}, at::kLong)};
    const void* reused = reuse[0].data_ptr();
    const comm::TensorList received = link.recv(0, Channel::activations(0), reuse);
    ASSERT_EQ(received.size(), 2u);
    EXPECT_TRUE(at::equal(received[0], activation));
    EXPECT_TRUE(received[0].requires_grad());
    EXPECT_FALSE(received[1].requires_grad());
    EXPECT_TRUE(at::equal(received[1], ids));
    EXPECT_EQ(received[0].data_ptr(), reused);  // filled in place
    link.send({received[0].detach() * 2}, 0, Channel::gradients(0));
  }
  EXPECT_EQ(link.bytes(), 2 * 15 * 4 + 4 * 8);
}

TEST(StageLink, PartitionedTransfersMoveAShareOfEachTensor) {
  auto world = comm::MpiCommunicator::world();
  const auto grid = std::make_shared<topology::Grid>(
      topology::pipe_model_data_parallel_topology(2, world->size() / 4, 2), world);
  const auto comms = cpu_communicators(grid);
  comms->connect_pipe(std::nullopt);  // every payload over MPI
  StageLink link(*comms, /*partitioned=*/true);
  const at::Tensor activation = at::arange(24, at::kFloat).reshape({4, 6});
  if (grid->is_first_stage()) {
    link.send({activation}, 1, Channel::activations(0));
  } else {
    const comm::TensorList received = link.recv(0, Channel::activations(0));
    ASSERT_EQ(received.size(), 1u);
    EXPECT_TRUE(at::equal(received[0], activation));
  }
  EXPECT_EQ(link.bytes(), 24 * 4 / 2);
}

TEST(GradientSync, SumsTiedGradientsAndAveragesReplicas) {
  const auto grid = pipe_data_grid();
  const auto module = tied_gpt(*grid);
  const auto comms = tied_communicators(grid, *module);
  data_parallel::GradientSync sync(*module, *comms, {.bucket_elements = 50 /* several */});
  // Replica r's gradients are r + 1 on stage 0 and 10 (r + 1) on stage 1.
  const double own = (grid->data_parallel_id() + 1) * (grid->is_first_stage() ? 1 : 10);
  fill_grads(*module, own);
  sync.reduce_tied();
  const at::Tensor tied = module->tied_parameters("embed").at(0);
  EXPECT_TRUE(at::equal(tied.grad(), at::full_like(tied, 11 * (grid->data_parallel_id() + 1))));
  sync.reduce_data_parallel();
  const double replicas = grid->data_parallel_size();
  const double mean = (replicas + 1) / 2;  // of r + 1 over the replicas
  for (const auto& [name, p] : module->named_parameters()) {
    const double expected = p.is_same(tied) ? 11 * mean : (grid->is_first_stage() ? 1 : 10) * mean;
    EXPECT_TRUE(at::allclose(p.grad(), at::full_like(p, expected))) << name;
  }
}

// Gradient buckets that average `parameters` (none late) over `data`.
data_parallel::GradientBuckets averaging(const std::vector<at::Tensor>& parameters,
                                         std::shared_ptr<comm::Communicator> data,
                                         std::shared_ptr<comm::Communicator> agree,
                                         int64_t bucket_elements, bool overlap) {
  const std::vector<bool> late(parameters.size(), false);
  auto reduction = std::make_shared<data_parallel::AveragedBuckets>(
      parameters, data_parallel::backward_order_buckets(parameters, late, bucket_elements), data,
      at::kFloat);
  return data_parallel::GradientBuckets(parameters, late, reduction, data, std::move(agree),
                                        overlap);
}

// Four parameters of 3 elements, in buckets of at most 7 (so [p3, p2], [p1, p0]); the
// loss of one micro-batch is the sum of (r + 1) * (i + 1) * p_i on data-parallel rank r.
struct BucketedLoss {
  BucketedLoss(const topology::Grid& grid, bool overlap,
               std::shared_ptr<comm::Communicator> data = nullptr)
      : parameters{at::ones({3}).requires_grad_(), at::ones({3}).requires_grad_(),
                   at::ones({3}).requires_grad_(), at::ones({3}).requires_grad_()},
        buckets(averaging(parameters, data ? data : grid.data_comm(), grid.data_comm(),
                          /*bucket_elements=*/7, overlap)),
        replica(grid.data_parallel_id() + 1) {}

  void backward() {
    at::Tensor loss = at::zeros({});
    for (std::size_t i = 0; i < parameters.size(); ++i)
      loss = loss + parameters[i].sum() * static_cast<double>(replica * (i + 1));
    loss.backward();
  }
  // After `micro_batches` backward passes: each gradient averaged over the replicas.
  void expect_averaged(const topology::Grid& grid, int micro_batches) {
    const double mean_replica = (grid.data_parallel_size() + 1) / 2.0;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      EXPECT_TRUE(
          at::allclose(parameters[i].grad(), at::full({3}, micro_batches * mean_replica * (i + 1))))
          << "parameter " << i << ": " << parameters[i].grad();
      parameters[i].mutable_grad() = at::Tensor();
    }
  }

  // A step of one micro-batch: the window opens, backward, the reduction.
  void step() {
    buckets.open();
    backward();
    buckets.finish();
  }

  std::vector<at::Tensor> parameters;
  data_parallel::GradientBuckets buckets;
  int replica;
};

TEST(GradientBuckets, StartDuringTheLastBackwardOnceTheyKnowItsAccumulations) {
  const auto grid = pipe_data_grid();
  BucketedLoss model(*grid, /*overlap=*/true);
  EXPECT_EQ(model.buckets.buckets(), 2);
  for (int step = 0; step < 3; ++step) {
    model.backward();  // an earlier micro-batch: not final
    model.step();
    // The first step counts the accumulations; later ones start both buckets in backward.
    EXPECT_EQ(model.buckets.started_in_backward(), step == 0 ? 0 : 2) << "step " << step;
    EXPECT_EQ(model.buckets.reduced_again(), 0);
    model.expect_averaged(*grid, 2);
  }
}

// The grid's data communicator, but one that allows a single thread to start operations.
class OneThread final : public testing::ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  comm::WorkPtr all_reduce_async(at::Tensor& t, comm::ReduceOp op) override {
    EXPECT_EQ(std::this_thread::get_id(), starter_) << "started on another thread";
    return inner().all_reduce_async(t, op);
  }
  bool starts_from_any_thread() const override { return false; }
  comm::WorkPtr reduce_scatter_async(const at::Tensor& t, at::Tensor& out,
                                     comm::ReduceOp op) override {
    EXPECT_EQ(std::this_thread::get_id(), starter_) << "started on another thread";
    return inner().reduce_scatter_async(t, out, op);
  }

 private:
  std::thread::id starter_ = std::this_thread::get_id();
};

TEST(GradientBuckets, StartOnTheirOwnThreadWhatBackwardOnAnotherMadeReady) {
  // As autograd's CUDA thread with a communicator for one thread: the arrivals there only
  // mark buckets ready; start_ready() on the engine's thread starts them.
  const auto grid = pipe_data_grid();
  BucketedLoss model(*grid, /*overlap=*/true, std::make_shared<OneThread>(grid->data_comm()));
  for (int step = 0; step < 2; ++step) {
    model.buckets.open();
    std::thread([&] { model.backward(); }).join();
    model.buckets.start_ready();
    model.buckets.finish();
    EXPECT_EQ(model.buckets.started_in_backward(), 0);
    model.expect_averaged(*grid, 1);
  }
}

TEST(GradientBuckets, ForgetAStepThatEndedBeforeTheReduction) {
  const auto grid = pipe_data_grid();
  BucketedLoss model(*grid, /*overlap=*/true);
  for (int step = 0; step < 2; ++step) {
    model.step();
    model.expect_averaged(*grid, 1);
  }
  model.buckets.open();
  model.backward();  // both buckets start; then the step throws on every replica
  EXPECT_EQ(model.buckets.started_in_backward(), 2);
  model.buckets.abandon();
  for (auto& p : model.parameters) p.mutable_grad() = at::Tensor();
  model.backward();  // an early micro-batch of the next step: not counted, nothing starts
  model.buckets.open();
  model.backward();
  model.buckets.finish();
  EXPECT_EQ(model.buckets.reduced_again(), 0);
  model.expect_averaged(*grid, 2);
}

TEST(GradientBuckets, ReduceAfterBackwardOnceOthersTookTheirHooks) {
  const auto grid = pipe_data_grid();
  BucketedLoss model(*grid, /*overlap=*/true);
  for (int step = 0; step < 3; ++step) {
    // From the second step on, another set of buckets over the same parameters holds the
    // hooks: these no longer hear of arrivals, so they must not start anything early.
    const std::vector<bool> none(model.parameters.size(), false);
    std::optional<data_parallel::GradientBuckets> other;
    if (step > 0) {
      other.emplace(
          model.parameters, none,
          std::make_shared<data_parallel::AveragedBuckets>(
              model.parameters, data_parallel::backward_order_buckets(model.parameters, none, 7),
              grid->data_comm(), at::kFloat),
          grid->data_comm(), grid->data_comm(), /*overlap=*/true);
    }
    model.step();
    EXPECT_EQ(model.buckets.started_in_backward(), 0) << "step " << step;
    model.expect_averaged(*grid, 1);
  }
}

TEST(GradientBuckets, ReduceAgainWhatGrewAfterItStarted) {
  const auto grid = pipe_data_grid();
  BucketedLoss model(*grid, /*overlap=*/true);
  for (int step = 0; step < 2; ++step) {  // one accumulation in the window
    model.step();
    model.expect_averaged(*grid, 1);
  }
  // Now two, on the first replica only: every replica reduces both buckets again.
  model.buckets.open();
  model.backward();
  if (grid->data_parallel_id() == 0) model.backward();
  model.buckets.finish();
  EXPECT_EQ(model.buckets.started_in_backward(), 2);
  EXPECT_EQ(model.buckets.reduced_again(), 2);
  const double mean_replica = (grid->data_parallel_size() + 1) / 2.0;
  const double extra = 1.0 / grid->data_parallel_size();  // the first replica's second pass
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(
        at::allclose(model.parameters[i].grad(), at::full({3}, (mean_replica + extra) * (i + 1))))
        << "parameter " << i;
  }
}

TEST(GradientBuckets, WithoutOverlapReduceEverythingAtTheEnd) {
  const auto grid = pipe_data_grid();
  BucketedLoss model(*grid, /*overlap=*/false);
  for (int step = 0; step < 2; ++step) {
    model.step();
    EXPECT_EQ(model.buckets.started_in_backward(), 0);
    model.expect_averaged(*grid, 1);
  }
}

TEST(GradientBuckets, CountDeferredWeightGradientsWhenTheyLand) {
  // A split backward leaves a linear weight's gradient for BackwardWeight: its arrival
  // counts then, so its bucket waits for it.
  const auto grid = pipe_data_grid();
  const at::Tensor weight = at::ones({2, 3}).requires_grad_();
  const double replica = grid->data_parallel_id() + 1;
  data_parallel::GradientBuckets buckets =
      averaging({weight}, grid->data_comm(), grid->data_comm(), 100,
                /*overlap=*/true);
  for (int step = 0; step < 2; ++step) {
    autograd::WeightGradStore store;
    buckets.open();
    {
      const autograd::SplittableBackward splittable;
      const at::Tensor x = at::full({1, 3}, replica).requires_grad_();
      const at::Tensor y = autograd::linear(x, weight);
      const autograd::DeferWeightGrads deferring(store);
      y.sum().backward();
    }
    EXPECT_FALSE(weight.grad().defined());
    store.run();
    buckets.finish();
    EXPECT_EQ(buckets.started_in_backward(), step == 0 ? 0 : 1);
    EXPECT_TRUE(
        at::allclose(weight.grad(), at::full({2, 3}, (grid->data_parallel_size() + 1) / 2.0)));
    weight.mutable_grad() = at::Tensor();
  }
}

TEST(GradientSync, CountsATiedTensorInTheNormOnItsFirstOwnerOnly) {
  const auto grid = pipe_data_grid();
  const auto module = tied_gpt(*grid);
  const auto comms = tied_communicators(grid, *module);
  data_parallel::GradientSync sync(*module, *comms, {.bucket_elements = 1000});
  const at::Tensor tied = module->tied_parameters("embed").at(0);
  const auto& counted = sync.norm_parameters();
  const bool has_tied = std::any_of(counted.begin(), counted.end(),
                                    [&](const at::Tensor& p) { return p.is_same(tied); });
  EXPECT_EQ(has_tied, grid->is_first_stage());
  EXPECT_EQ(counted.size() + (grid->is_first_stage() ? 0 : 1), module->parameters().size());
}

optim::StepConfig sgd(double lr, double clipping, optim::Precision dtype) {
  optim::StepConfig config;
  config.optimizer = {.type = "SGD", .params = {{"lr", lr}}};
  config.gradient_clipping = clipping;
  config.precision.dtype = dtype;
  return config;
}

TEST(MixedPrecisionOptimizer, StepsFp32MastersAndCopiesThemIntoABf16Model) {
  const auto grid = pipe_data_grid();
  const auto module = tied_gpt(*grid);
  module->to(at::kBFloat16);  // as the engine does before laying out data parallelism
  optim::MixedPrecisionOptimizer optimizer(*module, grid, sgd(0.5, 0, optim::Precision::kBf16),
                                           module->parameters());
  const at::Tensor p = module->parameters().front();
  EXPECT_EQ(p.scalar_type(), at::kBFloat16);
  const at::Tensor master = optimizer.master_of(p);
  EXPECT_EQ(master.scalar_type(), at::kFloat);
  const at::Tensor before = master.detach().clone();
  fill_grads(*module, 1.0);
  optimizer.step(0);
  EXPECT_TRUE(at::allclose(master, before - 0.5));
  EXPECT_TRUE(at::equal(p, master.to(at::kBFloat16)));
  EXPECT_FALSE(p.grad().defined());
  EXPECT_DOUBLE_EQ(optimizer.last_learning_rate(), 0.5);
}

// The global norm when every counted gradient element on this stage is `own`.
double norm_when_filled(const topology::Grid& grid, const data_parallel::GradientSync& sync,
                        double own) {
  int64_t own_elements = 0;
  for (const auto& p : sync.norm_parameters()) own_elements += p.numel();
  at::Tensor squares = at::tensor({own * own * own_elements}, at::kDouble);
  grid.pipe_comm()->all_reduce(squares, comm::ReduceOp::kSum);
  return std::sqrt(squares.item<double>());
}

TEST(MixedPrecisionOptimizer, ClipsToTheGlobalNormOverStages) {
  const auto grid = pipe_data_grid();
  const auto module = tied_gpt(*grid);
  const auto comms = tied_communicators(grid, *module);
  data_parallel::GradientSync sync(*module, *comms, {.bucket_elements = 1000});
  optim::MixedPrecisionOptimizer optimizer(*module, grid, sgd(1.0, 1.0, optim::Precision::kFp32),
                                           sync.norm_parameters());
  // Every counted gradient element is 1 on stage 0 and 2 on stage 1.
  const double own = grid->is_first_stage() ? 1 : 2;
  const double norm = norm_when_filled(*grid, sync, own);
  const at::Tensor p = module->parameters().back();
  const at::Tensor before = p.detach().clone();
  fill_grads(*module, own);
  optimizer.step(0);
  // Each tensor's norm is rounded to fp32 once, then summed in double.
  EXPECT_NEAR(optimizer.last_grad_norm(), norm, 1e-7 * norm);
  EXPECT_TRUE(at::allclose(p, before - own / (norm + 1e-6)));
}

TEST(MixedPrecisionOptimizer, ComputesTheNormOnlyWhenClippingOrAskedFor) {
  const auto grid = pipe_data_grid();
  const auto module = tied_gpt(*grid);
  const auto comms = tied_communicators(grid, *module);
  data_parallel::GradientSync sync(*module, *comms, {.bucket_elements = 1000});
  optim::MixedPrecisionOptimizer optimizer(*module, grid, sgd(0.1, 0.0, optim::Precision::kFp32),
                                           sync.norm_parameters());
  fill_grads(*module, 3.0);
  optimizer.step(0);
  EXPECT_TRUE(std::isnan(optimizer.last_grad_norm()));
  const double norm = norm_when_filled(*grid, sync, 3.0);
  optimizer.set_grad_norm_wanted(true);
  fill_grads(*module, 3.0);
  optimizer.step(1);
  EXPECT_NEAR(optimizer.last_grad_norm(), norm, 1e-7 * norm);
}

TEST(MixedPrecisionOptimizer, ScalesFp16LossesAndSkipsAStepThatOverflowsOnAnyRank) {
  const auto grid = pipe_data_grid();
  const auto module = tied_gpt(*grid);
  optim::StepConfig config = sgd(1.0, 0, optim::Precision::kFp16);
  config.precision.loss_scaler.initial_scale_power = 4;
  config.precision.loss_scaler.hysteresis = 1;
  module->to(at::kHalf);
  optim::MixedPrecisionOptimizer optimizer(*module, grid, config, module->parameters());
  EXPECT_DOUBLE_EQ(optimizer.loss_scale(), 16);
  const at::Tensor p = module->parameters().front();
  const at::Tensor before = optimizer.master_of(p).detach().clone();
  fill_grads(*module, 16.0);  // 1 once unscaled
  if (grid->global_rank() == grid->world_size() - 1)
    module->parameters().back().mutable_grad().fill_(std::numeric_limits<float>::infinity());
  optimizer.step(0);
  EXPECT_TRUE(at::equal(optimizer.master_of(p), before));  // skipped everywhere
  EXPECT_DOUBLE_EQ(optimizer.loss_scale(), 8);
  EXPECT_EQ(optimizer.loss_scaler().skipped_steps(), 1);
  fill_grads(*module, 8.0);
  optimizer.step(1);
  EXPECT_TRUE(at::allclose(optimizer.master_of(p), before - 1));
}

}  // namespace
}  // namespace pipetrain::engine
