// The engine's step on one stage issues the operators of a plain LibTorch loop doing the
// same step (bench/gpu_bench's PlainLoop: bf16 model, fp32 masters, the optimizer the
// engine builds, the loss in fp32 scaled by 1 / M) and no more per micro-batch: an added
// cast, copy, allocation or host read of the loss inside the step fails here. Its only
// additions are per step: the mean loss it returns (a buffer filled and read once).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "../models/op_recorder.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/models/gpt/gpt.h"
#include "pipetrain/optim/optimizer.h"

namespace pipetrain::testing {
namespace {

constexpr int64_t kOpsMicroBatch = 2;
const models::GptConfig kOpsGpt{
    .vocab_size = 64, .context = 16, .d_model = 32, .heads = 2, .layers = 2};
const optim::OptimizerConfig kOpsAdamW{"AdamW", {{"lr", 1e-4}, {"weight_decay", 0.0}}};

std::shared_ptr<data::TensorDataset> tokens(int micro_batches) {
  const int64_t samples = kOpsMicroBatch * micro_batches;
  return std::make_shared<data::TensorDataset>(
      module::Activation{at::randint(kOpsGpt.vocab_size, {samples, kOpsGpt.context}, at::kLong)},
      module::Activation{at::randint(kOpsGpt.vocab_size, {samples, kOpsGpt.context}, at::kLong)});
}

data::RepeatingLoader loader(std::shared_ptr<data::TensorDataset> data) {
  return data::RepeatingLoader(
      std::make_unique<data::DataLoader>(std::move(data), kOpsMicroBatch, 1, 0));
}

// The operators of the engine's second step (the first builds optimizer state).
std::vector<RecordedOp> engine_step(std::shared_ptr<data::TensorDataset> data, int micro_batches) {
  engine::TrainingConfig config;
  config.train_micro_batch_size_per_gpu = kOpsMicroBatch;
  config.gradient_accumulation_steps = micro_batches;
  config.steps_per_print = 1 << 30;
  config.precision.dtype = optim::Precision::kBf16;
  config.optimizer = kOpsAdamW;
  auto alone = comm::MpiCommunicator::world()->split(comm::MpiCommunicator::world()->rank(), 0);
  auto grid = std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(1, 1), alone);
  auto module = std::make_shared<module::PipelineModule>(
      models::gpt_layers(kOpsGpt), models::gpt_loss(), module::PipelineModuleOptions{});
  engine::PipelineEngine e(module, grid, config);
  e.set_progress_report(false);
  data::RepeatingLoader batches = loader(std::move(data));
  e.train_batch(&batches);
  return record_ops([&] { e.train_batch(&batches); });
}

// The same step as a plain loop; its second step's operators.
std::vector<RecordedOp> plain_step(std::shared_ptr<data::TensorDataset> data, int micro_batches) {
  module::PipelineModule model(models::gpt_layers(kOpsGpt), models::gpt_loss(), {});
  model.to(at::kBFloat16);
  std::vector<at::Tensor> params, masters;
  for (const auto& p : model.parameters()) {
    params.push_back(p);
    masters.push_back(p.detach().to(at::kFloat).clone().requires_grad_(true));
  }
  auto optimizer = optim::make_optimizer(kOpsAdamW, masters, true);
  data::RepeatingLoader batches = loader(std::move(data));
  auto step = [&] {
    at::Tensor loss_sum = at::zeros({}, at::kDouble);
    for (int i = 0; i < micro_batches; ++i) {
      engine::MicroBatch batch = batches.next();
      module::Activation outputs = model.forward(batch.inputs);
      for (auto& t : outputs) t = t.to(at::kFloat);
      const at::Tensor loss = model.loss(outputs, batch.labels);
      loss_sum += loss.detach().to(at::kDouble);
      (loss * (1.0 / micro_batches)).backward();
    }
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
      masters[i].mutable_grad() = params[i].grad().to(at::kFloat);
      params[i].mutable_grad() = at::Tensor();
    }
    optimizer->step();
    for (std::size_t i = 0; i < params.size(); ++i) {
      params[i].copy_(masters[i]);
      masters[i].mutable_grad() = at::Tensor();
    }
    return loss_sum.item<double>() / micro_batches;
  };
  step();
  return record_ops([&] { step(); });
}

// What the engine issues beyond the plain loop: "name(types)" -> how many more.
std::map<std::string, int> engine_extra(int micro_batches) {
  const auto data = tokens(micro_batches);
  std::map<std::string, int> extra;
  auto key = [](const RecordedOp& op) {
    std::string k = op.name + "(";
    for (const auto& d : op.dtypes) k += d + ",";
    return k + ")";
  };
  for (const auto& op : engine_step(data, micro_batches)) ++extra[key(op)];
  for (const auto& op : plain_step(data, micro_batches)) --extra[key(op)];
  std::erase_if(extra, [](const auto& kv) { return kv.second <= 0; });
  return extra;
}

std::string describe(const std::map<std::string, int>& ops) {
  std::string text;
  for (const auto& [op, n] : ops) text += " +" + std::to_string(n) + " " + op;
  return text.empty() ? " none" : text;
}

TEST(EngineOps, OneStageStepIssuesThePlainLoopsOperators) {
  if (comm::MpiCommunicator::world()->size() != 1) GTEST_SKIP() << "a one-rank test";
  const auto two = engine_extra(2), four = engine_extra(4);
  EXPECT_EQ(two, four) << "the engine adds operators per micro-batch: at 2," << describe(two)
                       << "; at 4," << describe(four);
  // The mean loss: a buffer made, filled with the sum and read (once per step).
  const std::map<std::string, int> per_step{
      {"aten::zeros()", 1}, {"aten::fill_(double,)", 1}, {"aten::item(double,)", 1}};
  EXPECT_EQ(four, per_step) << "beyond the plain loop the engine issues" << describe(four);
}

}  // namespace
}  // namespace pipetrain::testing
