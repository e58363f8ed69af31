#include "context_parallel/fused_attention.h"

#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>

#include <array>
#include <atomic>
#include <limits>
#include <mutex>
#include <stdexcept>

namespace pipetrain::context_parallel {

const char* to_string(FusedKernel kernel) {
  switch (kernel) {
    case FusedKernel::kNone:
      return "plain operators";
    case FusedKernel::kCpuFlash:
      return "CPU flash";
    case FusedKernel::kCudaFlash:
      return "CUDA flash";
    case FusedKernel::kCudaEfficient:
      return "CUDA memory-efficient";
  }
  return "?";
}

namespace {

std::array<std::atomic<int64_t>, 4> forward_calls{};  // by FusedKernel

// Switches ATen's cuDNN attention off for its scope, then back as it was. One scope at a
// time in the process: two overlapping ones would restore each other's setting.
class WithoutCuDnnAttention {
 public:
  WithoutCuDnnAttention() : lock_(mutex()), enabled_(at::globalContext().userEnabledCuDNNSDP()) {
    at::globalContext().setSDPUseCuDNN(false);
  }
  ~WithoutCuDnnAttention() { at::globalContext().setSDPUseCuDNN(enabled_); }
  WithoutCuDnnAttention(const WithoutCuDnnAttention&) = delete;
  WithoutCuDnnAttention& operator=(const WithoutCuDnnAttention&) = delete;

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  std::lock_guard<std::mutex> lock_;
  bool enabled_;
};

// ATen's choice for a square causal rectangle of these shapes (its checks of type, head dim,
// alignment, GPU generation and the user's enabled backends), asked with gradients as the
// ring will need them, and without cuDNN's attention: ATen prefers it on recent GPUs, and
// its backward takes other arguments, so flash is taken wherever it fits.
at::SDPBackend cuda_choice(const at::Tensor& rectangle) {
  const WithoutCuDnnAttention without_cudnn;
  try {
    return static_cast<at::SDPBackend>(
        at::_fused_sdp_choice(rectangle, rectangle, rectangle, {}, 0.0, /*is_causal=*/true));
  } catch (const c10::Error&) {  // every enabled backend refused these shapes
    return at::SDPBackend::error;
  }
}

}  // namespace

FusedKernel choose_fused_kernel(const at::Tensor& q, int64_t rows) {
  const auto type = q.scalar_type();
  if (type != at::kFloat && type != at::kBFloat16 && type != at::kHalf) return FusedKernel::kNone;
  if (q.is_cpu()) return FusedKernel::kCpuFlash;
  if (!q.is_cuda()) return FusedKernel::kNone;
  const at::SDPBackend choice = cuda_choice(q.narrow(2, 0, rows));
  if (choice == at::SDPBackend::flash_attention) return FusedKernel::kCudaFlash;
  if (choice == at::SDPBackend::efficient_attention) return FusedKernel::kCudaEfficient;
  return FusedKernel::kNone;
}

int64_t fused_forward_calls(FusedKernel kernel) {
  return forward_calls.at(static_cast<size_t>(kernel)).load();
}

AttentionPartial fused_forward(FusedKernel kernel, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, bool causal, double scale,
                               FusedRandomState* random) {
  ++forward_calls.at(static_cast<size_t>(kernel));
  AttentionPartial partial;
  switch (kernel) {
    case FusedKernel::kCpuFlash:
      std::tie(partial.out, partial.lse) = at::_scaled_dot_product_flash_attention_for_cpu(
          q.contiguous(), k.contiguous(), v.contiguous(), 0.0, causal, {}, scale);
      return partial;
    case FusedKernel::kCudaFlash: {
      const auto result =
          at::_scaled_dot_product_flash_attention(q, k, v, 0.0, causal, false, scale);
      partial.out = std::get<0>(result);
      partial.lse = std::get<1>(result);
      if (random) *random = {std::get<6>(result), std::get<7>(result)};
      return partial;
    }
    case FusedKernel::kCudaEfficient: {
      const auto result = at::_scaled_dot_product_efficient_attention(
          q, k, v, {}, /*compute_log_sumexp=*/true, 0.0, causal, scale);
      partial.out = std::get<0>(result);
      // Its log-sum-exp is padded to a multiple of 32 queries.
      partial.lse = std::get<1>(result).narrow(2, 0, q.size(2));
      if (random) *random = {std::get<2>(result), std::get<3>(result)};
      return partial;
    }
    case FusedKernel::kNone:
      break;
  }
  throw std::logic_error("fused attention: no fused kernel chosen");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_backward(
    FusedKernel kernel, const at::Tensor& d_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, bool causal, double scale,
    const FusedRandomState& random) {
  switch (kernel) {
    case FusedKernel::kCpuFlash:
      return at::_scaled_dot_product_flash_attention_for_cpu_backward(
          d_out.contiguous(), q.contiguous(), k.contiguous(), v.contiguous(), out.contiguous(),
          lse.contiguous(), 0.0, causal, {}, scale);
    case FusedKernel::kCudaFlash:
      return at::_scaled_dot_product_flash_attention_backward(
          d_out.contiguous(), q, k, v, out, lse.contiguous(), /*cum_seq_q=*/{}, /*cum_seq_k=*/{},
          q.size(2), k.size(2), 0.0, causal, random.seed, random.offset, scale);
    case FusedKernel::kCudaEfficient: {
      // As its forward returns them: the log-sum-exp padded to a multiple of 32 queries (with
      // +inf, as the kernel pads it), the output laid out [b, s, h, d] in memory (its fp16 and
      // bf16 backward reads the output by that layout, whatever the strides say).
      const int64_t rows = q.size(2), padded = (rows + 31) / 32 * 32;
      const at::Tensor lse_padded =
          at::constant_pad_nd(lse, {0, padded - rows}, std::numeric_limits<double>::infinity())
              .contiguous();
      const at::Tensor out_laid = out.transpose(1, 2).contiguous().transpose(1, 2);
      const auto grads = at::_scaled_dot_product_efficient_attention_backward(
          d_out.contiguous(), q, k, v, /*attn_bias=*/{}, out_laid, lse_padded, random.seed,
          random.offset, 0.0, std::array<bool, 4>{true, true, true, false}, causal, scale);
      return {std::get<0>(grads), std::get<1>(grads), std::get<2>(grads)};
    }
    case FusedKernel::kNone:
      break;
  }
  throw std::logic_error("fused attention: no fused kernel chosen");
}

}  // namespace pipetrain::context_parallel
