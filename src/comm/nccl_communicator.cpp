// NCCL transport for CUDA tensors; compiled in CUDA builds only.
#include "pipetrain/comm/nccl_communicator.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace pipetrain::comm {
namespace {

void check_cuda(cudaError_t code, const char* call) {
  if (code != cudaSuccess)
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(code));
}

void check_nccl(ncclResult_t code, const char* call) {
  if (code != ncclSuccess && code != ncclInProgress) {
    throw std::runtime_error(std::string(call) + ": " + ncclGetErrorString(code));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::kSum ? ncclSum : op == ReduceOp::kMax ? ncclMax : ncclAvg;
}

ncclDataType_t element_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return ncclFloat32;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kDouble:
      return ncclFloat64;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kChar:
      return ncclInt8;
    case at::kByte:
    case at::kBool:
      return ncclUint8;
    default:
      throw std::invalid_argument(std::string("NCCL cannot carry dtype ") + at::toString(type));
  }
}

std::size_t byte_count(const at::Tensor& tensor) {
  return static_cast<std::size_t>(tensor.numel()) * tensor.element_size();
}

class NcclCommunicator;

// An NCCL operation on the communicator's stream, complete once its event fires.
class NcclWork final : public Work {
 public:
  // `target`: where the result belongs when it is not `keep_alive` itself (copied there
  // on torch's stream once the work completes).
  NcclWork(NcclCommunicator& comm, std::string what, at::Tensor keep_alive, at::Tensor target = {});
  ~NcclWork() override { cudaEventDestroy(event_); }
  void wait() override;
  bool test() override;

 private:
  bool query() const;  // whether the event fired
  void finish();

  NcclCommunicator& comm_;
  std::string what_;
  at::Tensor keep_alive_;
  at::Tensor target_;
  cudaEvent_t event_ = nullptr;
  bool done_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<const MpiCommunicator> bootstrap, int device)
      : device_(device),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device)),
        bootstrap_(std::move(bootstrap)) {
    ncclUniqueId id;
    if (bootstrap_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    at::Tensor bytes = at::empty({static_cast<int64_t>(sizeof id)}, at::kByte);
    std::memcpy(bytes.data_ptr(), &id, sizeof id);
    const_cast<MpiCommunicator&>(*bootstrap_).broadcast(bytes, 0);
    std::memcpy(&id, bytes.data_ptr(), sizeof id);
    c10::cuda::CUDAGuard guard(device_);
    check_cuda(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming), "cudaEventCreate");
    check_nccl(ncclCommInitRank(&comm_, bootstrap_->size(), id, bootstrap_->rank()),
               "ncclCommInitRank");
  }

  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
    cudaEventDestroy(inputs_ready_);
  }

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  int global_rank(int rank) const override { return bootstrap_->global_rank(rank); }

  WorkPtr send(const at::Tensor& tensor, int peer, int tag) override {
    at::Tensor data = prepare(tensor);
    check_nccl(ncclSend(data.data_ptr(), byte_count(data), ncclUint8, peer, comm_, stream_),
               "ncclSend");
    return finish("NCCL send to rank " + std::to_string(global_rank(peer)) + " (tag " +
                      std::to_string(tag) + ")",
                  data);
  }

  WorkPtr recv(at::Tensor& tensor, int peer, int tag) override {
    if (!tensor.is_contiguous())
      throw std::invalid_argument("NCCL receives into contiguous tensors");
    prepare(tensor);
    check_nccl(ncclRecv(tensor.data_ptr(), byte_count(tensor), ncclUint8, peer, comm_, stream_),
               "ncclRecv");
    return finish("NCCL recv from rank " + std::to_string(global_rank(peer)) + " (tag " +
                      std::to_string(tag) + ")",
                  tensor);
  }

  void all_reduce(at::Tensor& tensor, ReduceOp op) override {
    all_reduce_async(tensor, op)->wait();
  }

  WorkPtr all_reduce_async(at::Tensor& tensor, ReduceOp op) override {
    if (op == ReduceOp::kAverage && !at::isFloatingType(tensor.scalar_type())) {
      throw std::invalid_argument("all_reduce average needs a floating-point tensor");
    }
    at::Tensor data = prepare(tensor);
    check_nccl(ncclAllReduce(data.data_ptr(), data.data_ptr(), data.numel(),
                             element_type(data.scalar_type()), nccl_op(op), comm_, stream_),
               "ncclAllReduce");
    return std::make_unique<NcclWork>(
        *this, "NCCL all_reduce over " + std::to_string(size()) + " ranks", data, tensor);
  }

  // NCCL's calls are thread-safe as long as one thread at a time uses a communicator.
  bool starts_from_any_thread() const override { return true; }

  void broadcast(at::Tensor& tensor, int root) override {
    at::Tensor data = prepare(tensor);
    check_nccl(ncclBroadcast(data.data_ptr(), data.data_ptr(), byte_count(data), ncclUint8, root,
                             comm_, stream_),
               "ncclBroadcast");
    finish("NCCL broadcast from rank " + std::to_string(global_rank(root)), data)->wait();
    if (!data.is_same(tensor)) tensor.copy_(data);
  }

  at::Tensor all_gather(const at::Tensor& input) override {
    at::Tensor data = prepare(input);
    std::vector<int64_t> shape{size()};
    shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
    at::Tensor gathered = at::empty(shape, data.options());
    prepare(gathered);
    check_nccl(ncclAllGather(data.data_ptr(), gathered.data_ptr(), byte_count(data), ncclUint8,
                             comm_, stream_),
               "ncclAllGather");
    finish("NCCL all_gather over " + std::to_string(size()) + " ranks", gathered)->wait();
    return gathered;
  }

  void all_gather_in_place(at::Tensor& blocks) override {
    if (blocks.dim() != 1 || !blocks.is_contiguous() || blocks.numel() % size() != 0) {
      throw std::invalid_argument(
          "all_gather_in_place needs a contiguous 1-D tensor of equal blocks");
    }
    prepare(blocks);
    const int64_t bytes = byte_count(blocks) / size();
    auto* base = static_cast<char*>(blocks.data_ptr());
    check_nccl(ncclAllGather(base + rank() * bytes, base, bytes, ncclUint8, comm_, stream_),
               "ncclAllGather");
    finish("NCCL all_gather over " + std::to_string(size()) + " ranks", blocks)->wait();
  }

  at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op) override {
    check_reducible(input, op, size());
    at::Tensor block = at::empty({input.numel() / size()}, input.options());
    reduce_scatter_async(input, block, op)->wait();
    return block;
  }

  WorkPtr reduce_scatter_async(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    check_reducible(input, op, size());
    if (!output.is_contiguous() || output.scalar_type() != input.scalar_type() ||
        output.numel() != input.numel() / size()) {
      throw std::invalid_argument(
          "reduce_scatter_async needs a contiguous block of the input's dtype");
    }
    at::Tensor data = prepare(input);
    prepare(output);
    check_nccl(ncclReduceScatter(data.data_ptr(), output.data_ptr(), output.numel(),
                                 element_type(data.scalar_type()), nccl_op(op), comm_, stream_),
               "ncclReduceScatter");
    return std::make_unique<NcclWork>(
        *this, "NCCL reduce_scatter over " + std::to_string(size()) + " ranks", output);
  }

  void barrier() override {
    at::Tensor token = at::zeros({1}, at::TensorOptions(at::kFloat).device(at::kCUDA, device_));
    all_reduce(token, ReduceOp::kSum);
  }

  // Ends this communicator after a failure, so pending operations return.
  void abort() {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  cudaStream_t stream() const { return stream_; }

 private:
  // Contiguous on this device, ordered after the work already queued on torch's stream,
  // and kept by the caching allocator until the communication stream is done with it.
  at::Tensor prepare(const at::Tensor& tensor) {
    if (!tensor.is_cuda() || tensor.get_device() != device_) {
      throw std::invalid_argument("the NCCL communicator carries tensors on cuda:" +
                                  std::to_string(device_));
    }
    at::Tensor data = tensor.contiguous();
    check_cuda(cudaEventRecord(inputs_ready_, c10::cuda::getCurrentCUDAStream(device_)),
               "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, inputs_ready_, 0), "cudaStreamWaitEvent");
    c10::cuda::CUDACachingAllocator::recordStream(data.storage().data_ptr(), stream_);
    return data;
  }

  WorkPtr finish(std::string what, const at::Tensor& tensor) {
    return std::make_unique<NcclWork>(*this, std::move(what), tensor);
  }

  int device_;
  c10::cuda::CUDAStream stream_;
  std::shared_ptr<const MpiCommunicator> bootstrap_;  // ranks the peers
  ncclComm_t comm_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;  // reused: recorded on torch's stream before each op
};

NcclWork::NcclWork(NcclCommunicator& comm, std::string what, at::Tensor keep_alive,
                   at::Tensor target)
    : comm_(comm),
      what_(std::move(what)),
      keep_alive_(std::move(keep_alive)),
      target_(std::move(target)) {
  check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventRecord(event_, comm_.stream()), "cudaEventRecord");
}

bool NcclWork::query() const {
  const cudaError_t state = cudaEventQuery(event_);
  if (state == cudaErrorNotReady) return false;
  check_cuda(state, "cudaEventQuery");
  return true;
}

void NcclWork::wait() {
  if (done_) return;
  try {
    wait_with_deadline([this] { return query(); }, [this] { return what_; }, comm_.timeout());
  } catch (const DeadlineExceeded&) {
    comm_.abort();
    throw;
  }
  finish();
}

bool NcclWork::test() {
  if (!done_ && query()) finish();
  return done_;
}

void NcclWork::finish() {
  // Later kernels on torch's stream see the result without blocking the host again.
  check_cuda(
      cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(keep_alive_.get_device()), event_, 0),
      "cudaStreamWaitEvent");
  if (target_.defined() && !target_.is_same(keep_alive_)) target_.copy_(keep_alive_);
  done_ = true;
}

}  // namespace

bool nccl_compiled() {
  return true;
}

std::shared_ptr<Communicator> make_nccl_communicator(
    std::shared_ptr<const MpiCommunicator> bootstrap, int device) {
  return std::make_shared<NcclCommunicator>(std::move(bootstrap), device);
}

}  // namespace pipetrain::comm
