#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

namespace pipetrain::device {

// Host copies of tensors that training changes after them (a checkpoint written while the
// next steps run). CPU tensors are copied at once. A GPU tensor is copied into pinned host
// memory on a side stream of its GPU: the side stream first waits for the work queued so
// far (the copies see the step's final values), and close() makes the GPU's current stream
// wait for the copies before its next work (training changes nothing under them), while
// the host goes on at once. wait() blocks until every copy is in host memory.
class HostCopies {
 public:
  HostCopies();
  ~HostCopies();
  HostCopies(const HostCopies&) = delete;
  HostCopies& operator=(const HostCopies&) = delete;

  // A host copy of `tensor`, whole once wait() returns. On the thread that trains.
  at::Tensor add(const at::Tensor& tensor);
  // No more copies: the GPUs' current streams wait for them. On the thread that trains.
  void close();
  // Blocks until every copy is in host memory (after close()). On any thread.
  void wait() const;

 private:
  struct Streams;  // per GPU: its side stream and the copies' end (CUDA builds only)
  std::unique_ptr<Streams> streams_;
};

}  // namespace pipetrain::device
