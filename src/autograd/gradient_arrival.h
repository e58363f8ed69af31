#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace pipetrain::autograd {

// Calls `arrived` each time a gradient has been added into the leaf `parameter`'s .grad():
// by autograd's accumulation, and by a weight gradient deferred to a later BackwardWeight
// (linear.h). Not for an accumulation of nothing (a deferred weight's empty gradient). It
// runs on the thread that accumulates (autograd's device thread for CUDA). A parameter has
// one: this replaces an earlier one set by any `owner`, and throws std::logic_error if the
// parameter holds another kind of post-accumulate hook (e.g. one from Python).
void set_gradient_arrival(const at::Tensor& parameter, std::function<void()> arrived,
                          const void* owner);
// Whether the parameter's hook is the one `owner` set (a later owner may have replaced it).
bool has_gradient_arrival(const at::Tensor& parameter, const void* owner);
// Removes the parameter's hook if `owner` set it (a later owner's stays).
void clear_gradient_arrival(const at::Tensor& parameter, const void* owner);

// Calls `parameter`'s arrival hook, if any: for code that accumulates into .grad() itself.
void announce_gradient_arrival(const at::Tensor& parameter);

}  // namespace pipetrain::autograd
