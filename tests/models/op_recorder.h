// What ATen and autograd record while some work runs: the list the PyTorch profiler shows,
// taken from the same RecordFunction events, for comparing a model's operators with eager
// PyTorch's (tests/models/gpt_op_lists.py) and for counting them.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace pipetrain::testing {

struct RecordedOp {
  std::string name;                 // "aten::addmm", or an autograd node's "AddmmBackward0"
  std::vector<std::string> dtypes;  // of its tensor inputs, as the profiler names them
  bool copies = false;  // copies data (aten::copy_, clone or _to_copy), itself or within
};

// The outermost ATen operators (those an operator calls itself are left out) and the
// autograd nodes that `work` runs on this thread, in order. For CPU work: a backward on a
// GPU runs its nodes on autograd's device thread, which this does not record.
std::vector<RecordedOp> record_ops(const std::function<void()>& work);

}  // namespace pipetrain::testing
