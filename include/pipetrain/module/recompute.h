#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

// Selective activation recompute: the parts of a layer whose activations backward computes
// again instead of keeping them from forward, chosen by kind (Megatron's
// --recompute-modules) and per pipeline stage. A layer asks recomputes(kind) where it runs
// such a part and wraps it in recomputed(); the stage's PipelineModule sets the kinds for
// the scope of its forward.
namespace pipetrain::module {

enum class RecomputeKind : uint8_t {
  kAttention,      // core attention: the scores and softmax (q, k, v kept)
  kMlp,            // the whole MLP: its projections and activation (its input kept)
  kMlpActivation,  // the MLP's activation and its output projection (the features kept)
  kNorms,          // the norms before attention and MLP (their inputs kept)
  kExperts,        // a mixture of experts' routing, dispatch and experts (its input kept)
};

// A set of kinds, as a bit mask.
class RecomputeSet {
 public:
  RecomputeSet() = default;
  RecomputeSet& add(RecomputeKind kind) {
    bits_ |= bit(kind);
    return *this;
  }
  bool contains(RecomputeKind kind) const { return (bits_ & bit(kind)) != 0; }
  bool empty() const { return bits_ == 0; }
  bool operator==(const RecomputeSet&) const = default;
  // The kinds' names in declaration order ("attention", "mlp", ...).
  std::vector<std::string> names() const;

 private:
  static uint8_t bit(RecomputeKind kind) {
    return static_cast<uint8_t>(1u << static_cast<int>(kind));
  }
  uint8_t bits_ = 0;
};

// Every kind, by name: "attention", "mlp", "mlp_activation", "norms", "experts".
const std::vector<std::pair<std::string, RecomputeKind>>& recompute_kinds();
// The kind named `name`, if any.
std::optional<RecomputeKind> recompute_kind(const std::string& name);

// The kinds this thread's layers recompute while alive (the stage's forward sets it).
class RecomputeScope {
 public:
  explicit RecomputeScope(RecomputeSet kinds);
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  RecomputeSet previous_;
};

// Whether a part of `kind` should be recomputed now: in a scope naming it, with gradients
// recorded, and not while a checkpoint runs its function again (which records it all).
bool recomputes(RecomputeKind kind);

// `function` of `inputs` (tensors), recomputed in backward when recomputes(kind), else run
// as is. `parameters`: those `function` uses (their gradients come as without recompute).
// Random draws repeat exactly (dropout masks as in the first run).
at::Tensor recomputed(RecomputeKind kind,
                      const std::function<at::Tensor(const std::vector<at::Tensor>&)>& function,
                      const std::vector<at::Tensor>& inputs,
                      const std::vector<at::Tensor>& parameters);

}  // namespace pipetrain::module
