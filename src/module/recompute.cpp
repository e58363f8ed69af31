#include "pipetrain/module/recompute.h"

#include <ATen/ATen.h>

#include "module/activation_checkpoint.h"

namespace pipetrain::module {
namespace {

thread_local RecomputeSet current;

}  // namespace

const std::vector<std::pair<std::string, RecomputeKind>>& recompute_kinds() {
  static const std::vector<std::pair<std::string, RecomputeKind>> kinds = {
      {"attention", RecomputeKind::kAttention},
      {"mlp", RecomputeKind::kMlp},
      {"mlp_activation", RecomputeKind::kMlpActivation},
      {"norms", RecomputeKind::kNorms},
      {"experts", RecomputeKind::kExperts}};
  return kinds;
}

std::optional<RecomputeKind> recompute_kind(const std::string& name) {
  for (const auto& [known, kind] : recompute_kinds()) {
    if (known == name) return kind;
  }
  return std::nullopt;
}

std::vector<std::string> RecomputeSet::names() const {
  std::vector<std::string> found;
  for (const auto& [name, kind] : recompute_kinds()) {
    if (contains(kind)) found.push_back(name);
  }
  return found;
}

RecomputeScope::RecomputeScope(RecomputeSet kinds) : previous_(current) {
  current = kinds;
}

RecomputeScope::~RecomputeScope() {
  current = previous_;
}

bool recomputes(RecomputeKind kind) {
  return current.contains(kind) && at::GradMode::is_enabled() && !recomputing();
}

at::Tensor recomputed(RecomputeKind kind,
                      const std::function<at::Tensor(const std::vector<at::Tensor>&)>& function,
                      const std::vector<at::Tensor>& inputs,
                      const std::vector<at::Tensor>& parameters) {
  if (!recomputes(kind)) return function(inputs);
  std::vector<at::Tensor> trained;
  for (const auto& p : parameters) {
    if (p.defined() && p.requires_grad()) trained.push_back(p);
  }
  return checkpointed([function](const Activation& in) { return Activation{function(in)}; }, inputs,
                      trained)
      .at(0);
}

}  // namespace pipetrain::module
