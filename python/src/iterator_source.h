#pragma once

#include "pipetrain/engine/micro_batch_source.h"
#include "py_ref.h"

namespace pipetrain::python {

// Micro-batches from a Python iterator, as DeepSpeed's pipeline engine reads one: each
// next() is a (inputs, labels) pair, each a tensor or a tuple of tensors; the first stage
// feeds the inputs, the last stage compares with the labels. StopIteration ends the data
// (engine::DataExhausted). The GIL is held for each next() only.
class IteratorSource : public engine::MicroBatchSource {
 public:
  explicit IteratorSource(SharedPy iterator) : iterator_(std::move(iterator)) {}
  engine::MicroBatch next() override;

 private:
  SharedPy iterator_;
};

}  // namespace pipetrain::python
