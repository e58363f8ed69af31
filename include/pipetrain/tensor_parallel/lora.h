#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "pipetrain/tensor_parallel/group.h"

// LoRA (Hu et al., 2021) on Megatron's linear layers: a frozen y = x Wᵀ plus a trained
// low-rank update (alpha / rank) · B A dropout(x), A [rank, in] and B [out, rank] as peft's
// lora_A and lora_B. A column-parallel layer splits B by output features (A replicated), a
// row-parallel one splits A by input features (B replicated): each rank computes exactly its
// layer's share, and the replicated factor's gradient is summed over the group.
namespace pipetrain::tensor_parallel {

struct LoraOptions {
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0;  // on the adapter's input only, as peft's lora_dropout (not under
                       // context parallelism: its slices would share one mask)
  double scale() const { return alpha / static_cast<double>(rank); }
};

// The whole A [rank, in] as peft draws it (Kaiming-uniform, a = √5: U(±1/√in)), from the
// default generator; B starts at zero, so an adapted layer starts as the base.
at::Tensor initial_lora_a(int64_t rank, int64_t in_features);

// A column-parallel layer's update, [..., out / size], from its whole input as the layer
// gathers it once for both (enter_parallel_region: its gradient summed with the base's).
at::Tensor column_lora(const at::Tensor& whole, const at::Tensor& a, const at::Tensor& b,
                       const LoraOptions& options, bool training, const Group& group);

// A row-parallel layer's share of the update, [..., out], from this rank's slice of the
// input features: the layer sums the shares over the group with its own partial products.
// Dropout draws the whole input's mask and keeps this rank's columns.
at::Tensor row_lora(const at::Tensor& x, const at::Tensor& a, const at::Tensor& b,
                    const LoraOptions& options, bool training, const Group& group);

}  // namespace pipetrain::tensor_parallel
