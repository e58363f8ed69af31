// The CUDA build's host copies: pinned memory, a side stream per GPU, events between them.
#include "device/host_copies.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <stdexcept>

namespace pipetrain::device {

struct HostCopies::Streams {
  struct Side {
    c10::cuda::CUDAStream stream;
    at::cuda::CUDAEvent copied;  // recorded on `stream` by close()
  };
  std::map<c10::DeviceIndex, Side> sides;
  bool closed = false;

  // The side stream of `gpu` (made on first use), made to wait for the work queued on the
  // current stream so far: what made the tensor about to be copied.
  c10::cuda::CUDAStream side_of(c10::DeviceIndex gpu) {
    auto found = sides.find(gpu);
    if (found == sides.end()) {
      Side side{c10::cuda::getStreamFromPool(/*isHighPriority=*/false, gpu), {}};
      found = sides.emplace(gpu, std::move(side)).first;
    }
    at::cuda::CUDAEvent queued;
    queued.record(c10::cuda::getCurrentCUDAStream(gpu));
    queued.block(found->second.stream);
    return found->second.stream;
  }
};

HostCopies::HostCopies() : streams_(std::make_unique<Streams>()) {}

HostCopies::~HostCopies() {
  // The copies' pinned buffers are freed safely in any case (the host allocator waits for
  // their copies); waiting here keeps a failure from outliving its save.
  if (!streams_->closed) return;
  try {
    wait();
  } catch (const std::exception&) {  // a CUDA failure: the save that owns these is failing
  }
}

at::Tensor HostCopies::add(const at::Tensor& tensor) {
  if (streams_->closed) throw std::logic_error("HostCopies::add after close()");
  if (!tensor.is_cuda()) return tensor.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
  const c10::DeviceIndex gpu = tensor.device().index();
  const c10::cuda::CUDAStream side = streams_->side_of(gpu);
  at::Tensor host =
      at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(true));
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    host.copy_(tensor, /*non_blocking=*/true);
  }
  // The source may be a temporary (a joined layer): its memory is not reused until the
  // side stream has read it.
  c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), side);
  return host;
}

void HostCopies::close() {
  if (streams_->closed) return;
  streams_->closed = true;
  for (auto& [gpu, side] : streams_->sides) {
    side.copied.record(side.stream);
    side.copied.block(c10::cuda::getCurrentCUDAStream(gpu));
  }
}

void HostCopies::wait() const {
  if (!streams_->closed) throw std::logic_error("HostCopies::wait before close()");
  for (auto& [gpu, side] : streams_->sides) side.copied.synchronize();
}

}  // namespace pipetrain::device
