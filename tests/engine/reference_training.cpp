#include "reference_training.h"

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <ATen/ATen.h>

#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/tensor_parallel/token_reduction.h"

namespace pipetrain::testing {
namespace {

constexpr double kLearningRate = 0.01;
constexpr double kMomentum = 0.9;

// The SGD rate of a case. A Mixtral's experts see a share of the tokens each, so their
// gradients are small: at 0.01 five steps move them by about 2e-5, too little for a wrong
// expert update to show against the tolerance. At 0.3 they move by some 6e-4.
double sgd_rate(const Case& c) {
  return c.model.rfind("mixtral", 0) == 0 ? 0.3 : kLearningRate;
}

}  // namespace

std::string name(const Case& c) {
  return c.model + " m=" + std::to_string(c.micro_batches) +
         " ckpt=" + std::to_string(c.checkpoint_interval) + " clip=" + std::to_string(c.clipping) +
         (c.weight_decay > 0 ? " AdamW wd=" + std::to_string(c.weight_decay) : "");
}

models::ModelConfig model_config(const std::string& model) {
  models::ModelConfig config;
  if (model == "mlp") {
    config.type = models::family("mlp");
    config.mlp = {.inputs = 6, .hidden = 12, .outputs = 3, .layers = 3, .task = "regression"};
  } else if (model.rfind("llama", 0) == 0 || model.rfind("mixtral", 0) == 0 ||
             model.rfind("qwen", 0) == 0 || model.rfind("mistral", 0) == 0 ||
             model.rfind("gemma3", 0) == 0) {
    config.type = model.rfind("llama", 0) == 0      ? models::family("llama")
                  : model.rfind("qwen2", 0) == 0    ? models::family("qwen2")
                  : model.rfind("qwen3moe", 0) == 0 ? models::family("qwen3_moe")
                  : model.rfind("qwen3", 0) == 0    ? models::family("qwen3")
                  : model.rfind("mistral", 0) == 0  ? models::family("mistral")
                  : model.rfind("gemma3", 0) == 0   ? models::family("gemma3")
                                                    : models::family("mixtral");
    config.llama = {.vocab_size = 20,
                    .context = model.find("-ctx8") != std::string::npos ? 8 : 6,
                    .d_model = 8,
                    .heads = 4,
                    .num_key_value_heads = 2,
                    .intermediate_size = 12,
                    .layers = model.find("-deep") != std::string::npos ? 6 : 2,
                    .tie_embeddings = model.find("tied") != std::string::npos &&
                                      model.find("untied") == std::string::npos};
    // Each family's own parts, with windows shorter than the context and a scaled rotation:
    // Qwen2's q/k/v biases and windows past its first block (YaRN), Qwen3's q/k norms and
    // wider heads (LLaMA 3.1's rotation), Mistral's windows everywhere (linear scaling).
    if (config.type == models::family("qwen2")) {
      config.llama.sliding_window = 4;
      config.llama.max_window_layers = 1;
      config.llama.rope_scaling = {
          .type = models::RopeType::kYarn, .factor = 2.0, .original_max_position_embeddings = 4};
    } else if (config.type == models::family("qwen3")) {
      config.llama.head_dim = 4;
      config.llama.rope_scaling = {
          .type = models::RopeType::kLlama3, .factor = 4.0, .original_max_position_embeddings = 4};
    } else if (config.type == models::family("mistral")) {
      config.llama.sliding_window = 3;
      config.llama.rope_scaling = {.type = models::RopeType::kLinear, .factor = 2.0};
    } else if (config.type == models::family("gemma3")) {
      // Gemma 3: blocks 0, 2, ... sliding (window 3, their own base), the others global;
      // wider heads scaled by 3^-1/2, logits capped at 2.
      config.llama.head_dim = 4;
      config.llama.sliding_window = 3;
      config.llama.sliding_window_pattern = 2;
      config.llama.rope_local_base_freq = 100.0;
      config.llama.query_pre_attn_scalar = 3.0;
      config.llama.final_logit_softcapping = 2.0;
    }
    // Auxiliary losses weighty enough to move the router visibly.
    config.moe = {.experts = 4, .experts_per_token = 2};
    config.moe.router_aux_loss_coef = 0.1;
    config.moe.router_z_loss_coef = 0.01;
    if (model.find("-capacity") != std::string::npos) config.moe.capacity_factor = 1.0;
    // Qwen3-MoE: q/k norms, experts narrower than the dense MLP, scores not renormalised,
    // block 1 dense.
    if (config.type == models::family("qwen3_moe")) {
      config.llama.head_dim = 4;
      config.moe.norm_topk_prob = false;
      config.moe.moe_intermediate_size = 6;
      config.moe.mlp_only_layers = {1};
    }
    if (model.find("-shared") != std::string::npos) {
      config.moe.score = models::RouterScore::kSigmoid;
      config.moe.shared_experts = 1;
    }
  } else {
    config.gpt = {.vocab_size = 20,
                  .context = model.find("-ctx8") != std::string::npos ? 8 : 6,
                  .d_model = 8,
                  .heads = model.rfind("gpt-heads4", 0) == 0 ? 4 : 2,
                  .layers = model.find("-deep") != std::string::npos ? 6 : 2,
                  .dropout = 0.0,
                  .tie_embeddings = model.find("untied") == std::string::npos};
  }
  return config;
}

module::LoraConfig lora_config(const std::string& model) {
  if (model.find("-lora") == std::string::npos) return {};
  return {.rank = 4, .alpha = 8, .target_modules = module::lora_targets()};
}

std::shared_ptr<data::TensorDataset> dataset(const Case& c, int data_parallel) {
  const models::ModelConfig config = model_config(c.model);
  const int64_t samples = int64_t{kSteps + 1} * kMicroBatchSize * c.micro_batches * data_parallel;
  at::manual_seed(42);
  if (config.type == models::family("mlp")) {
    return std::make_shared<data::TensorDataset>(
        module::Activation{at::randn({samples, config.mlp.inputs})},
        module::Activation{at::randn({samples, config.mlp.outputs})});
  }
  const models::TokenInput tokens = *models::make_builtin_model(config).tokens();
  module::Activation inputs{at::randint(tokens.vocab_size, {samples, tokens.context}, at::kLong)};
  module::Activation labels{at::randint(tokens.vocab_size, {samples, tokens.context}, at::kLong)};
  if (c.model.find("-packed") != std::string::npos) {
    // Packed documents: a new one starts at about every third position.
    const at::Tensor starts = at::rand({samples, tokens.context}) < 0.3;
    starts.select(1, 0).fill_(false);
    inputs.push_back(starts.to(at::kLong).cumsum(1));
  }
  if (c.model.find("-masked") != std::string::npos) {
    // Loss masks as chat data has them: each sample counts its own share of its tokens
    // (none in some), so micro-batches and replicas count unequally many.
    const at::Tensor share = at::rand({samples, 1});
    labels[0].masked_fill_(at::rand({samples, tokens.context}) >= share,
                           tensor_parallel::kIgnoreIndex);
  }
  return std::make_shared<data::TensorDataset>(inputs, labels);
}

engine::TrainingConfig training_config(const Case& c) {
  engine::TrainingConfig config;
  config.train_micro_batch_size_per_gpu = kMicroBatchSize;
  config.gradient_accumulation_steps = c.micro_batches;
  config.gradient_clipping = c.clipping;
  config.steps_per_print = 1000;
  if (c.model == "mlp" && c.weight_decay > 0) {
    config.optimizer = {"AdamW", {{"lr", kLearningRate}, {"weight_decay", c.weight_decay}}};
  } else if (c.model == "mlp") {
    config.optimizer = {"Adam", {{"lr", kLearningRate}}};
  } else {
    config.optimizer = {"SGD", {{"lr", sgd_rate(c)}, {"momentum", kMomentum}}};
  }
  config.pipeline.activation_checkpoint_interval = c.checkpoint_interval;
  config.per_token_loss = c.model.find("-masked") != std::string::npos;
  return config;
}

// One process, one model, the whole global batch per step: what pipetrain must equal.
Reference reference_run(const Case& c, int data_parallel,
                        const std::shared_ptr<data::TensorDataset>& data) {
  const auto model = models::make_builtin_model(model_config(c.model));
  module::PipelineModule whole(model.layers, model.loss,
                               {.seed = 1234, .lora = lora_config(c.model)});
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (c.model == "mlp" && c.weight_decay > 0) {
    // Two parameter groups, as Megatron-style recipes set them: matrices decay, biases not.
    std::vector<at::Tensor> matrices, others;
    for (const auto& p : whole.parameters()) (p.dim() >= 2 ? matrices : others).push_back(p);
    const auto options = torch::optim::AdamWOptions(kLearningRate).weight_decay(c.weight_decay);
    auto no_decay = std::make_unique<torch::optim::AdamWOptions>(options);
    no_decay->weight_decay(0);
    optimizer = std::make_unique<torch::optim::AdamW>(
        std::vector<torch::optim::OptimizerParamGroup>{
            torch::optim::OptimizerParamGroup(matrices),
            torch::optim::OptimizerParamGroup(others, std::move(no_decay))},
        options);
  } else if (c.model == "mlp") {
    optimizer = std::make_unique<torch::optim::Adam>(whole.parameters(),
                                                     torch::optim::AdamOptions(kLearningRate));
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(
        whole.parameters(), torch::optim::SGDOptions(sgd_rate(c)).momentum(kMomentum));
  }
  std::vector<std::unique_ptr<data::DataLoader>> replicas;
  for (int r = 0; r < data_parallel; ++r) {
    replicas.push_back(std::make_unique<data::DataLoader>(data, kMicroBatchSize, data_parallel, r));
  }
  auto next_global_batch = [&] {
    std::vector<std::vector<at::Tensor>> inputs;  // per input tensor
    std::vector<at::Tensor> labels;
    for (auto& loader : replicas) {
      for (int j = 0; j < c.micro_batches; ++j) {
        engine::MicroBatch batch = loader->next();
        inputs.resize(batch.inputs.size());
        for (std::size_t k = 0; k < batch.inputs.size(); ++k) inputs[k].push_back(batch.inputs[k]);
        labels.push_back(batch.labels[0]);
      }
    }
    engine::MicroBatch global{{}, {at::cat(labels)}};
    for (const auto& parts : inputs) global.inputs.push_back(at::cat(parts));
    return global;
  };
  Reference reference;
  for (const auto& [name, tensor] : whole.named_parameters())
    reference.initial_weights[name] = tensor.detach().clone();
  for (const auto& [name, tensor] : whole.named_frozen())
    reference.frozen[name] = tensor.detach().clone();
  for (int step = 0; step < kSteps; ++step) {
    const engine::MicroBatch batch = next_global_batch();
    optimizer->zero_grad();
    const at::Tensor loss = whole.loss(whole.forward(batch.inputs), batch.labels);
    loss.backward();
    if (c.clipping > 0)
      reference.grad_norms.push_back(
          torch::nn::utils::clip_grad_norm_(whole.parameters(), c.clipping));
    optimizer->step();
    reference.losses.push_back(loss.item<double>());
  }
  for (const auto& [name, tensor] : whole.named_parameters()) {
    reference.weights[name] = tensor.detach();
  }
  at::NoGradGuard no_grad;
  const engine::MicroBatch held_out = next_global_batch();
  reference.eval_loss = whole.loss(whole.forward(held_out.inputs), held_out.labels).item<double>();
  return reference;
}

}  // namespace pipetrain::testing
