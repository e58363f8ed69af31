// NCCL transport for CUDA tensors; compiled in CUDA builds only.
//
// The rules it keeps (each the fix of a failure a read of the first version predicted):
// - one lock per communicator around preparing, enqueuing and recording an operation, so
//   autograd's device thread and the engine's thread never interleave inside NCCL calls;
// - a CUDAGuard for the communicator's GPU wherever an event is made, recorded or destroyed
//   (a bare thread's current device is 0);
// - blocking communicators (config.blocking, and NCCL_COMM_BLOCKING=1 set before NCCL's first
//   call, which would otherwise override it), and anything but ncclSuccess is an error;
// - every operation is watched by the watchdog from before its NCCL call (a first call may
//   block the host while NCCL connects to the peers) until its event fires; the watchdog
//   enforces the deadline, polls ncclCommGetAsyncError, and ends the job with one line
//   naming the operation;
// - the collectives are stream-ordered: the caller's current stream waits on the operation's
//   event and the host goes on;
// - Work::wait() blocks the host (with deadline and the same error polling) and always makes
//   the calling thread's current stream wait, whichever thread waited first;
// - half and bf16 sums and averages are reduced in fp32 and rounded once, as over MPI (NCCL
//   would round at every hop of its ring, so the two transports would differ);
// - after a deadline or an NCCL error the job is failed: no abort, no destroy (both need the
//   peers, which may be gone); run_rank's MPI_Abort ends the job (see job_failure.h).
#include "comm/nccl_communicator.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "comm/job_failure.h"
#include "comm/watchdog.h"

namespace pipetrain::comm {
namespace {

void check_cuda(cudaError_t code, const char* call) {
  if (code != cudaSuccess)
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(code));
}

void check_nccl(ncclResult_t code, const char* call) {
  if (code != ncclSuccess) {
    mark_job_failed(std::string(call) + " failed");
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

// The NCCL communicator itself, shared with the watchdog's view of operations in flight.
// Ended by PeerTeardown: destroyed on a clean exit, left alone once the job failed.
struct NcclHandle {
  ncclComm_t comm = nullptr;
  std::optional<PeerTeardown> teardown;  // set once the communicator exists

  // The communicator's asynchronous error, named; empty while there is none.
  std::string async_error() const {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return "ncclCommGetAsyncError failed";
    if (state == ncclSuccess || state == ncclInProgress) return {};
    return std::string("NCCL error: ") + ncclGetErrorString(state);
  }
};

// A CUDA event on one GPU, made, recorded and destroyed with that GPU current.
class DeviceEvent {
 public:
  explicit DeviceEvent(int device) : device_(device) {
    const c10::cuda::CUDAGuard guard(device_);
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~DeviceEvent() {
    const c10::cuda::CUDAGuard guard(device_);
    cudaEventDestroy(event_);
  }
  DeviceEvent(const DeviceEvent&) = delete;
  DeviceEvent& operator=(const DeviceEvent&) = delete;

  void record(cudaStream_t stream) {
    const c10::cuda::CUDAGuard guard(device_);
    check_cuda(cudaEventRecord(event_, stream), "cudaEventRecord");
  }
  // Whether the work recorded before it has completed.
  bool query() const {
    const c10::cuda::CUDAGuard guard(device_);  // the watchdog's thread has no device of its own
    const cudaError_t state = cudaEventQuery(event_);
    if (state == cudaErrorNotReady) return false;
    check_cuda(state, "cudaEventQuery");
    return true;
  }
  // Makes `stream` wait for the event.
  void order(cudaStream_t stream) const {
    const c10::cuda::CUDAGuard guard(device_);
    check_cuda(cudaStreamWaitEvent(stream, event_, 0), "cudaStreamWaitEvent");
  }
  // Makes the calling thread's current stream on this GPU wait for the event.
  void order_current_stream() const { order(c10::cuda::getCurrentCUDAStream(device_)); }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

// An NCCL operation on the communicator's stream, complete once its event fires.
class NcclWork final : public Work {
 public:
  // `target`: where the result belongs when it is not `keep_alive` itself (copied there on
  // the waiting thread's stream).
  NcclWork(std::shared_ptr<NcclHandle> handle, std::shared_ptr<DeviceEvent> event, std::string what,
           Seconds timeout, at::Tensor keep_alive, at::Tensor target = {})
      : handle_(std::move(handle)),
        event_(std::move(event)),
        what_(std::move(what)),
        timeout_(timeout),
        keep_alive_(std::move(keep_alive)),
        target_(std::move(target)) {}

  void wait() override {
    const std::lock_guard lock(mutex_);
    if (!done_) {
      try {
        wait_with_deadline(
            [this] {
              if (const std::string error = handle_->async_error(); !error.empty())
                throw std::runtime_error(what_ + " failed: " + error);
              return event_->query();
            },
            [this] { return what_; }, timeout_);
      } catch (const std::exception& e) {
        mark_job_failed(e.what());  // the NCCL work stays queued: the job must end
        throw;
      }
      done_ = true;
    }
    // Every waiter's stream sees the result, not only the first one's.
    event_->order_current_stream();
    if (target_.defined() && !target_.is_same(keep_alive_) && !copied_) {
      // Read on this stream: the allocator must not hand the memory out before the copy.
      c10::cuda::CUDACachingAllocator::recordStream(
          keep_alive_.storage().data_ptr(),
          c10::cuda::getCurrentCUDAStream(keep_alive_.get_device()));
      target_.copy_(keep_alive_);
      copied_ = true;
    }
  }

  // Only asks: a helper thread may test (engine::TransferProgress); wait() then orders the
  // waiting thread's stream and copies the result.
  bool test() override {
    if (!done_.load() && event_->query()) done_ = true;
    return done_.load();
  }

 private:
  std::shared_ptr<NcclHandle> handle_;
  std::shared_ptr<DeviceEvent> event_;
  std::string what_;
  Seconds timeout_;
  at::Tensor keep_alive_;
  at::Tensor target_;
  std::mutex mutex_;  // one waiter at a time
  std::atomic<bool> done_{false};
  bool copied_ = false;
};

class NcclCommunicator final : public Communicator {
  // One operation, watched from before its NCCL call until its event fires.
  struct Issue {
    std::shared_ptr<DeviceEvent> event;
    std::shared_ptr<std::atomic<bool>> recorded;  // the event marks the operation's end
  };

 public:
  NcclCommunicator(std::shared_ptr<const MpiCommunicator> bootstrap, int device, NcclStream stream)
      : device_(device),
        owned_stream_(stream == NcclStream::kOwn ? create_stream(device) : nullptr),
        stream_(owned_stream_ ? c10::cuda::getStreamFromExternal(owned_stream_, device)
                              : c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device)),
        bootstrap_(std::move(bootstrap)),
        handle_(std::make_shared<NcclHandle>()),
        watchdog_(Watchdog::shared()),
        inputs_ready_(device) {
    ncclUniqueId id;
    if (bootstrap_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    at::Tensor bytes = at::empty({static_cast<int64_t>(sizeof id)}, at::kByte);
    std::memcpy(bytes.data_ptr(), &id, sizeof id);
    const_cast<MpiCommunicator&>(*bootstrap_).broadcast(bytes, 0);
    std::memcpy(&id, bytes.data_ptr(), sizeof id);
    const c10::cuda::CUDAGuard guard(device_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;  // whatever NCCL_COMM_BLOCKING says: calls return when done
    check_nccl(
        ncclCommInitRankConfig(&handle_->comm, bootstrap_->size(), id, bootstrap_->rank(), &config),
        "ncclCommInitRankConfig");
    handle_->teardown.emplace([comm = handle_->comm] { ncclCommDestroy(comm); });
  }

  ~NcclCommunicator() override {
    // A clean exit first lets the watchdog see this communicator's work through.
    if (collective_teardown_allowed()) watchdog_->drain();
    if (handle_->teardown) handle_->teardown->end();
    // An owned stream outlives the communicator: tensors it sent or received may be freed
    // later, and the caching allocator then records an event on the streams they were used
    // on (one stream per pipe lane, a handful per process).
  }

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  int global_rank(int rank) const override { return bootstrap_->global_rank(rank); }
  Transport transport() const override { return Transport::kNccl; }

  WorkPtr send(const at::Tensor& tensor, int peer, int tag) override {
    const std::string what = "NCCL send to rank " + std::to_string(global_rank(peer)) + " (tag " +
                             std::to_string(tag) + ")";
    const std::lock_guard lock(issue_);
    at::Tensor data = prepare(tensor);
    Issue issue = watch(what);
    check_nccl(ncclSend(data.data_ptr(), byte_count(data), ncclUint8, peer, handle_->comm, stream_),
               "ncclSend");
    return work(issue, what, data);
  }

  WorkPtr recv(at::Tensor& tensor, int peer, int tag) override {
    if (!tensor.is_contiguous())
      throw std::invalid_argument("NCCL receives into contiguous tensors");
    const std::string what = "NCCL recv from rank " + std::to_string(global_rank(peer)) + " (tag " +
                             std::to_string(tag) + ")";
    const std::lock_guard lock(issue_);
    prepare(tensor);
    Issue issue = watch(what);
    check_nccl(
        ncclRecv(tensor.data_ptr(), byte_count(tensor), ncclUint8, peer, handle_->comm, stream_),
        "ncclRecv");
    return work(issue, what, tensor);
  }

  // Stream-ordered: the result is there for later work on the caller's current stream.
  void all_reduce(at::Tensor& tensor, ReduceOp op) override {
    check_average(tensor, op);
    const std::lock_guard lock(issue_);
    at::Tensor data = prepare(widened(tensor, op));
    Issue issue = watch("NCCL all_reduce over " + ranks());
    check_nccl(ncclAllReduce(data.data_ptr(), data.data_ptr(), data.numel(),
                             element_type(data.scalar_type()), nccl_op(op), handle_->comm, stream_),
               "ncclAllReduce");
    ordered(issue);
    if (!data.is_same(tensor)) tensor.copy_(data);
  }

  WorkPtr all_reduce_async(at::Tensor& tensor, ReduceOp op) override {
    check_average(tensor, op);
    const std::lock_guard lock(issue_);
    at::Tensor data = prepare(widened(tensor, op));
    const std::string what = "NCCL all_reduce over " + ranks();
    Issue issue = watch(what);
    check_nccl(ncclAllReduce(data.data_ptr(), data.data_ptr(), data.numel(),
                             element_type(data.scalar_type()), nccl_op(op), handle_->comm, stream_),
               "ncclAllReduce");
    return work(issue, what, data, tensor);
  }

  // Every issuing call holds the communicator's lock (one thread inside NCCL per
  // communicator), so autograd's device thread may start buckets.
  bool starts_from_any_thread() const override { return true; }

  void broadcast(at::Tensor& tensor, int root) override {
    const std::lock_guard lock(issue_);
    at::Tensor data = prepare(tensor);
    Issue issue = watch("NCCL broadcast from rank " + std::to_string(global_rank(root)));
    check_nccl(ncclBroadcast(data.data_ptr(), data.data_ptr(), byte_count(data), ncclUint8, root,
                             handle_->comm, stream_),
               "ncclBroadcast");
    ordered(issue);
    if (!data.is_same(tensor)) tensor.copy_(data);
  }

  at::Tensor all_gather(const at::Tensor& input) override {
    std::vector<int64_t> shape{size()};
    shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
    const std::lock_guard lock(issue_);
    at::Tensor data = prepare(input);
    at::Tensor gathered = at::empty(shape, data.options());
    prepare(gathered);
    Issue issue = watch("NCCL all_gather over " + ranks());
    check_nccl(ncclAllGather(data.data_ptr(), gathered.data_ptr(), byte_count(data), ncclUint8,
                             handle_->comm, stream_),
               "ncclAllGather");
    ordered(issue);
    return gathered;
  }

  void all_gather_in_place(at::Tensor& blocks) override {
    const std::lock_guard lock(issue_);
    ordered(enqueue_all_gather_in_place(blocks));
  }

  WorkPtr all_gather_in_place_async(at::Tensor& blocks) override {
    const std::lock_guard lock(issue_);
    return work(enqueue_all_gather_in_place(blocks), "NCCL all_gather over " + ranks(), blocks);
  }

  at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op) override {
    check_reducible(input, op, size());
    const at::Tensor wide = widened(input, op);
    at::Tensor block = at::empty({input.numel() / size()}, wide.options());
    const std::lock_guard lock(issue_);
    Issue issue = enqueue_reduce_scatter(wide, block, op);
    ordered(issue);
    return block.to(input.scalar_type());
  }

  WorkPtr reduce_scatter_async(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    check_reducible(input, op, size());
    if (!output.is_contiguous() || output.scalar_type() != input.scalar_type() ||
        output.numel() != input.numel() / size()) {
      throw std::invalid_argument(
          "reduce_scatter_async needs a contiguous block of the input's dtype");
    }
    const at::Tensor wide = widened(input, op);
    const std::string what = "NCCL reduce_scatter over " + ranks();
    if (wide.scalar_type() == input.scalar_type()) {
      const std::lock_guard lock(issue_);
      Issue issue = enqueue_reduce_scatter(input, output, op);
      return work(issue, what, output);
    }
    at::Tensor block = at::empty({output.numel()}, wide.options());  // rounded into output
    const std::lock_guard lock(issue_);
    Issue issue = enqueue_reduce_scatter(wide, block, op);
    return work(issue, what, block, output);
  }

  // Every send and receive in one NCCL group, as NCCL needs for exchanges that would
  // otherwise wait on each other. Stream-ordered, as all_reduce().
  void all_to_all(const std::vector<at::Tensor>& outgoing, std::vector<at::Tensor>& incoming,
                  int tag) override {
    if (static_cast<int>(outgoing.size()) != size() || static_cast<int>(incoming.size()) != size())
      throw std::invalid_argument("all_to_all needs one tensor to and from each rank");
    const std::lock_guard lock(issue_);
    std::vector<at::Tensor> sent(size());
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      if (outgoing[r].numel() > 0) sent[r] = prepare(outgoing[r]);
      if (incoming[r].numel() == 0) continue;
      if (!incoming[r].is_contiguous())
        throw std::invalid_argument("NCCL receives into contiguous tensors");
      prepare(incoming[r]);
    }
    Issue issue = watch("NCCL all_to_all over " + ranks() + " (tag " + std::to_string(tag) + ")");
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size(); ++r) {
      if (sent[r].defined())
        check_nccl(
            ncclSend(sent[r].data_ptr(), byte_count(sent[r]), ncclUint8, r, handle_->comm, stream_),
            "ncclSend");
      if (r != rank() && incoming[r].numel() > 0)
        check_nccl(ncclRecv(incoming[r].data_ptr(), byte_count(incoming[r]), ncclUint8, r,
                            handle_->comm, stream_),
                   "ncclRecv");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    ordered(issue);
    incoming[rank()].copy_(outgoing[rank()]);
  }

  // Blocks the host: a barrier is for the host.
  void barrier() override {
    at::Tensor token = at::zeros({1}, at::TensorOptions(at::kFloat).device(at::kCUDA, device_));
    all_reduce_async(token, ReduceOp::kSum)->wait();
  }

 private:
  static void check_average(const at::Tensor& tensor, ReduceOp op) {
    if (op == ReduceOp::kAverage && !at::isFloatingType(tensor.scalar_type()))
      throw std::invalid_argument("all_reduce average needs a floating-point tensor");
  }

  // Half and bf16 sums and averages in fp32 (one rounding at the end, as MPI's); else as is.
  static at::Tensor widened(const at::Tensor& tensor, ReduceOp op) {
    const bool narrow = tensor.scalar_type() == at::kHalf || tensor.scalar_type() == at::kBFloat16;
    return narrow && op != ReduceOp::kMax ? tensor.to(at::kFloat) : tensor;
  }

  std::string ranks() const {
    std::string text = std::to_string(size()) + " ranks (";
    for (int r = 0; r < size(); ++r) text += (r ? ", " : "") + std::to_string(global_rank(r));
    return text + ")";
  }

  // Contiguous on this device, ordered after the work already queued on the calling
  // thread's stream, and kept by the caching allocator until the communication stream is
  // done with it. The caller holds issue_.
  at::Tensor prepare(const at::Tensor& tensor) {
    if (!tensor.is_cuda() || tensor.get_device() != device_) {
      throw std::invalid_argument("the NCCL communicator carries tensors on cuda:" +
                                  std::to_string(device_));
    }
    const c10::cuda::CUDAGuard guard(device_);
    at::Tensor data = tensor.contiguous();
    inputs_ready_.record(c10::cuda::getCurrentCUDAStream(device_));
    inputs_ready_.order(stream_);
    c10::cuda::CUDACachingAllocator::recordStream(data.storage().data_ptr(), stream_);
    return data;
  }

  // The caller holds issue_.
  Issue enqueue_all_gather_in_place(at::Tensor& blocks) {
    if (blocks.dim() != 1 || !blocks.is_contiguous() || blocks.numel() % size() != 0) {
      throw std::invalid_argument(
          "all_gather_in_place needs a contiguous 1-D tensor of equal blocks");
    }
    prepare(blocks);
    const int64_t bytes = byte_count(blocks) / size();
    auto* base = static_cast<char*>(blocks.data_ptr());
    Issue issue = watch("NCCL all_gather over " + ranks());
    check_nccl(ncclAllGather(base + rank() * bytes, base, bytes, ncclUint8, handle_->comm, stream_),
               "ncclAllGather");
    return issue;
  }

  Issue enqueue_reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
    at::Tensor data = prepare(input);
    prepare(output);
    Issue issue = watch("NCCL reduce_scatter over " + ranks());
    check_nccl(
        ncclReduceScatter(data.data_ptr(), output.data_ptr(), output.numel(),
                          element_type(data.scalar_type()), nccl_op(op), handle_->comm, stream_),
        "ncclReduceScatter");
    return issue;
  }

  // Watches the operation about to be enqueued (the caller holds issue_).
  Issue watch(std::string what) {
    Issue issue{std::make_shared<DeviceEvent>(device_), std::make_shared<std::atomic<bool>>(false)};
    watchdog_->watch({.what = std::move(what),
                      .context = wait_context(),
                      .done = [issue] { return issue.recorded->load() && issue.event->query(); },
                      .error = [handle = handle_] { return handle->async_error(); },
                      .timeout = timeout()});
    return issue;
  }

  // The operation just enqueued ends at its event.
  void record(const Issue& issue) {
    issue.event->record(stream_);
    issue.recorded->store(true);
  }

  WorkPtr work(const Issue& issue, std::string what, at::Tensor keep_alive,
               at::Tensor target = {}) {
    record(issue);
    return std::make_unique<NcclWork>(handle_, issue.event, std::move(what), timeout(),
                                      std::move(keep_alive), std::move(target));
  }

  // The operation just enqueued, ordered before later work on the caller's stream.
  void ordered(const Issue& issue) {
    record(issue);
    issue.event->order_current_stream();
  }

  // A high-priority stream of this communicator's own.
  static cudaStream_t create_stream(int device) {
    const c10::cuda::CUDAGuard guard(device);
    int least = 0, greatest = 0;
    check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest),
               "cudaDeviceGetStreamPriorityRange");
    cudaStream_t stream = nullptr;
    check_cuda(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest),
               "cudaStreamCreateWithPriority");
    return stream;
  }

  int device_;
  cudaStream_t owned_stream_;  // null on a pooled stream; never destroyed (see the destructor)
  c10::cuda::CUDAStream stream_;
  std::shared_ptr<const MpiCommunicator> bootstrap_;  // ranks the peers
  std::shared_ptr<NcclHandle> handle_;
  std::shared_ptr<Watchdog> watchdog_;  // outlives this communicator's operations
  std::mutex issue_;                    // one thread at a time prepares, enqueues and records
  DeviceEvent inputs_ready_;  // recorded on the caller's stream before each op (under issue_)
};

}  // namespace

bool nccl_compiled() {
  return true;
}

std::shared_ptr<Communicator> make_nccl_communicator(
    std::shared_ptr<const MpiCommunicator> bootstrap, int device, NcclStream stream) {
  // Before NCCL's first call, which reads its environment once: an NCCL_COMM_BLOCKING=0
  // there would override the blocking config.
  setenv("NCCL_COMM_BLOCKING", "1", /*overwrite=*/1);
  return std::make_shared<NcclCommunicator>(std::move(bootstrap), device, stream);
}

}  // namespace pipetrain::comm
