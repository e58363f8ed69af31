#pragma once
// The single-process reference the multi-rank equivalence tests compare against: one
// model, the whole global batch per step, plain LibTorch autograd and optimizers.
//
// The GPT trains with SGD + momentum, the MLP with Adam (or AdamW): GPT's key bias has an exactly
// zero gradient (softmax ignores a shift shared by all scores), and Adam divides such a
// gradient's rounding noise by its own size, which turns 1e-10 noise into visible steps
// in any two runs that add the micro-batches in a different order.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/training_config.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/module/lora_config.h"

namespace pipetrain::testing {

constexpr int kSteps = 5;
constexpr int kMicroBatchSize = 2;

struct Case {
  // gpt, gpt-untied, gpt-heads4 (tied), llama (untied), llama-tied, mlp; mixtral (the
  // LLaMA's sizes, 4 experts, top 2; "-capacity": capacity factor 1; "-shared": sigmoid
  // scores and a shared expert); "-deep": 6 blocks, not 2; "-ctx8": a context of 8, not 6;
  // "-packed": packed documents (inputs {ids, documents}); "-masked": labels masked
  // unequally per sample, the loss per token over the global batch (per_token_loss);
  // "-recompute", "-recompute-act": parts of layers recomputed (the engine's side only);
  // "-lora": LoRA adapters of rank 4 on every projection, the rest frozen
  std::string model;
  int micro_batches;
  int checkpoint_interval;
  double clipping;
  double weight_decay = 0;  // > 0: the MLP trains with AdamW and this decay, not Adam
};

std::string name(const Case& c);
models::ModelConfig model_config(const std::string& model);
module::LoraConfig lora_config(const std::string& model);
// Enough samples for kSteps + 1 batches over `data_parallel` replicas.
std::shared_ptr<data::TensorDataset> dataset(const Case& c, int data_parallel);
engine::TrainingConfig training_config(const Case& c);

struct Reference {
  std::vector<double> losses;
  std::vector<double> grad_norms;  // each step's, before clipping (when the case clips)
  double eval_loss = 0;            // on the batch after the last step, with the final weights
  std::map<std::string, at::Tensor> initial_weights, weights;
  std::map<std::string, at::Tensor> frozen;  // the frozen parameters (LoRA's base), at the start
};

// Trains kSteps on the global batches `data_parallel` replicas would read from `data`.
Reference reference_run(const Case& c, int data_parallel,
                        const std::shared_ptr<data::TensorDataset>& data);

}  // namespace pipetrain::testing
