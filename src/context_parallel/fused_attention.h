#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

// One rectangle of attention through ATen's fused kernels that return the log-sum-exp, and
// its backward from the whole row's output and log-sum-exp (how ring attention computes a
// block without keeping its scores): the CPU flash kernel, and on CUDA the flash kernel
// (fp16, bf16) or the memory-efficient one (fp32 too), whichever ATen's own choice for
// scaled_dot_product_attention would take, cuDNN's attention left out.
namespace pipetrain::context_parallel {

enum class FusedKernel { kNone, kCpuFlash, kCudaFlash, kCudaEfficient };

const char* to_string(FusedKernel kernel);

// The fused kernel for square rectangles of `rows` queries and keys of q's type, heads and
// device ([batch, heads, seq, head dim]), without a mask other than causal; kNone where
// none fits (plain operators then).
FusedKernel choose_fused_kernel(const at::Tensor& q, int64_t rows);

// One rectangle's attention and its log-sum-exp.
struct AttentionPartial {
  at::Tensor out;  // [b, h, sq, d], q's type
  at::Tensor lse;  // [b, h, sq]: float from a fused kernel
};

// The random-number state a CUDA kernel returns beside its output and its backward takes
// back (unused without dropout; kept as the forward returned it, of the type it returned).
struct FusedRandomState {
  at::Tensor seed, offset;
};

// How many rectangles `kernel` has computed forward in this process (all threads).
int64_t fused_forward_calls(FusedKernel kernel);

// Attention of q over k and v (as many heads; causal: the square rectangle's lower
// triangle, top-left aligned), with `scale`.
AttentionPartial fused_forward(FusedKernel kernel, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, bool causal, double scale,
                               FusedRandomState* random = nullptr);

// The gradients of q, k and v for one rectangle, given the whole rows' output `out` and
// log-sum-exp `lse` ([b, h, sq], float) and the gradient of the output.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_backward(
    FusedKernel kernel, const at::Tensor& d_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, bool causal, double scale,
    const FusedRandomState& random);

}  // namespace pipetrain::context_parallel
