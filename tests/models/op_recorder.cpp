#include "op_recorder.h"

#include <ATen/record_function.h>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string_view>

namespace pipetrain::testing {
namespace {

thread_local std::vector<RecordedOp>* sink = nullptr;
thread_local int aten_depth = 0;           // ATen operators open around the current event
thread_local std::ptrdiff_t open_op = -1;  // index of the outermost operator open, if recorded

bool copies(std::string_view name) {
  return name == "aten::copy_" || name == "aten::clone" || name == "aten::_to_copy";
}

struct OpenEvent : at::ObserverContext {
  explicit OpenEvent(bool aten_) : aten(aten_) {}
  bool aten;
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  const std::string_view name = fn.name();
  const bool aten = name.starts_with("aten::");
  const bool node =
      fn.scope() == at::RecordScope::BACKWARD_FUNCTION && !name.starts_with("autograd::engine::");
  if (sink && open_op >= 0 && aten_depth > 0 && copies(name)) (*sink)[open_op].copies = true;
  if (sink && ((aten && aten_depth == 0) || node)) {
    RecordedOp op{std::string(name), {}};
    if (fn.needsInputs()) {
      for (const c10::IValue& input : fn.inputs()) {
        if (input.isTensor() && input.toTensor().defined())
          op.dtypes.emplace_back(input.toTensor().dtype().name());
      }
    }
    op.copies = copies(name);
    sink->push_back(std::move(op));
    if (aten) open_op = static_cast<std::ptrdiff_t>(sink->size()) - 1;
  }
  if (aten) ++aten_depth;
  return std::make_unique<OpenEvent>(aten);
}

void on_end(const at::RecordFunction&, at::ObserverContext* context) {
  if (static_cast<OpenEvent*>(context)->aten && --aten_depth == 0) open_op = -1;
}

}  // namespace

std::vector<RecordedOp> record_ops(const std::function<void()>& work) {
  if (sink) throw std::logic_error("record_ops does not nest");
  std::vector<RecordedOp> ops;
  sink = &ops;
  aten_depth = 0;
  open_op = -1;
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_start, on_end)
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  try {
    work();
  } catch (...) {
    at::removeCallback(handle);
    sink = nullptr;
    throw;
  }
  at::removeCallback(handle);
  sink = nullptr;
  return ops;
}

}  // namespace pipetrain::testing
