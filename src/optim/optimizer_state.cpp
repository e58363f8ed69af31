#include "optim/optimizer_state.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <stdexcept>

namespace pipetrain::optim {
namespace {

at::Tensor find(const comm::NamedTensors& state, const std::string& name) {
  for (const auto& [n, t] : state) {
    if (n == name) return t;
  }
  return {};
}

// Adam and AdamW keep the same fields in different classes.
template <typename State>
comm::NamedTensors adam_like(const State& s) {
  comm::NamedTensors out = {{"step", at::tensor(s.step(), at::kLong)},
                            {"exp_avg", s.exp_avg()},
                            {"exp_avg_sq", s.exp_avg_sq()}};
  if (s.max_exp_avg_sq().defined()) out.emplace_back("max_exp_avg_sq", s.max_exp_avg_sq());
  return out;
}

template <typename State>
std::unique_ptr<State> adam_like(const comm::NamedTensors& saved, const at::Tensor& parameter) {
  auto s = std::make_unique<State>();
  const at::Tensor step = find(saved, "step");
  if (!step.defined()) throw std::invalid_argument("Adam state without a step count");
  s->step(step.item<int64_t>());
  s->exp_avg(find(saved, "exp_avg").to(parameter.options()).clone());
  s->exp_avg_sq(find(saved, "exp_avg_sq").to(parameter.options()).clone());
  if (const at::Tensor m = find(saved, "max_exp_avg_sq"); m.defined())
    s->max_exp_avg_sq(m.to(parameter.options()).clone());
  return s;
}

}  // namespace

comm::NamedTensors optimizer_state(torch::optim::Optimizer& optimizer,
                                   const at::Tensor& parameter) {
  auto& states = optimizer.state();
  const auto it = states.find(parameter.unsafeGetTensorImpl());
  if (it == states.end()) return {};
  if (const auto* s = dynamic_cast<const torch::optim::AdamParamState*>(it->second.get()))
    return adam_like(*s);
  if (const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(it->second.get()))
    return adam_like(*s);
  if (const auto* s = dynamic_cast<const torch::optim::SGDParamState*>(it->second.get())) {
    return {{"momentum_buffer", s->momentum_buffer()}};
  }
  throw std::invalid_argument("cannot save the state of this optimizer");
}

void set_optimizer_state(torch::optim::Optimizer& optimizer, const at::Tensor& parameter,
                         const comm::NamedTensors& state) {
  auto& states = optimizer.state();
  void* key = parameter.unsafeGetTensorImpl();
  if (state.empty()) {
    states.erase(key);
    return;
  }
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    states[key] = adam_like<torch::optim::AdamWParamState>(state, parameter);
  } else if (dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    states[key] = adam_like<torch::optim::AdamParamState>(state, parameter);
  } else if (dynamic_cast<torch::optim::SGD*>(&optimizer)) {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(find(state, "momentum_buffer").to(parameter.options()).clone());
    states[key] = std::move(s);
  } else {
    throw std::invalid_argument("cannot restore the state of this optimizer");
  }
}

}  // namespace pipetrain::optim
