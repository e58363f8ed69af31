#include "pipetrain/comm/mpi_communicator.h"

#include <ATen/ATen.h>

#include <chrono>
#include <climits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace pipetrain::comm {
namespace {

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string(call) + " failed: " + std::string(text, length));
}

int byte_count(const at::Tensor& tensor) {
  const auto bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  if (bytes > INT_MAX) {
    throw std::invalid_argument("MPI transfers are limited to 2 GiB per tensor, got " +
                                std::to_string(bytes) + " bytes");
  }
  return static_cast<int>(bytes);
}

// The element type MPI reduces; half-precision types are reduced in float32 instead.
MPI_Datatype reduce_datatype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    case at::kByte:
    case at::kBool:
      return MPI_UINT8_T;
    case at::kChar:
      return MPI_INT8_T;
    default:
      throw std::invalid_argument(std::string("MPI cannot reduce dtype ") + at::toString(type));
  }
}

// A contiguous CPU tensor holding `tensor`'s values (itself when already so).
at::Tensor host_copy(const at::Tensor& tensor) {
  return tensor.is_cuda() ? tensor.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous()
                          : tensor.contiguous();
}

// A contiguous CPU tensor to receive into: `tensor` itself when possible, else pinned
// host memory (CUDA) or a contiguous scratch copy.
at::Tensor host_target(const at::Tensor& tensor) {
  if (!tensor.is_cuda() && tensor.is_contiguous()) return tensor;
  return at::empty(tensor.sizes(),
                   tensor.options().device(at::kCPU).pinned_memory(tensor.is_cuda()));
}

void wait_for(MPI_Request& request, const std::function<std::string()>& what, Seconds timeout) {
  int complete = 0;
  wait_with_deadline(
      [&] {
        check(MPI_Test(&request, &complete, MPI_STATUS_IGNORE), "MPI_Test");
        return complete != 0;
      },
      what, timeout);
}

// A nonblocking MPI operation in flight: wait() and test() poll its request (wait() with
// the communicator's deadline) and call finish() once, when it completes.
class MpiRequest : public Work {
 public:
  explicit MpiRequest(const MpiCommunicator& comm) : comm_(comm) {}

  MPI_Request* request() { return &request_; }

  void wait() override {
    if (done_) return;
    wait_for(
        request_, [this] { return describe(); }, comm_.timeout());
    finish();
    done_ = true;
  }

  bool test() override {
    if (done_) return true;
    int complete = 0;
    check(MPI_Test(&request_, &complete, MPI_STATUS_IGNORE), "MPI_Test");
    if (complete == 0) return false;
    finish();
    done_ = true;
    return true;
  }

 protected:
  virtual std::string describe() const = 0;
  virtual void finish() = 0;

  const MpiCommunicator& comm_;
  MPI_Request request_ = MPI_REQUEST_NULL;

 private:
  bool done_ = false;
};

// A point-to-point transfer in flight.
class MpiWork final : public MpiRequest {
 public:
  MpiWork(const MpiCommunicator& comm, bool is_send, int peer, int tag, at::Tensor host,
          at::Tensor target)
      : MpiRequest(comm),
        is_send_(is_send),
        peer_(peer),
        tag_(tag),
        host_(std::move(host)),
        target_(std::move(target)) {}

  // An abandoned receive (after a failure or a deadline) must not swallow a later message,
  // and MPI must not write into memory freed under it: a cancelled receive not yet matched
  // settles at once, but one already matched (or a send) may still be moving bytes. It gets
  // a moment; if it has not settled by then, its buffer is left allocated for good.
  ~MpiWork() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (request_ == MPI_REQUEST_NULL || finalized) return;
    if (!is_send_) MPI_Cancel(&request_);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    int settled = 0;
    while (MPI_Test(&request_, &settled, MPI_STATUS_IGNORE) == MPI_SUCCESS && !settled &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (settled) return;
    new at::Tensor(host_);  // deliberately never freed: MPI may still touch it
    MPI_Request_free(&request_);
  }

 private:
  void finish() override {
    // A receive staged through host memory lands in its real target now.
    if (target_.defined() && !target_.is_same(host_)) target_.copy_(host_);
  }

  std::string describe() const override {
    return std::string(is_send_ ? "send to" : "recv from") + " rank " +
           std::to_string(comm_.global_rank(peer_)) + " (tag " + std::to_string(tag_) + ")";
  }

  bool is_send_;
  int peer_;
  int tag_;
  at::Tensor host_;    // the memory MPI reads or writes
  at::Tensor target_;  // receives only: where the data belongs
};

// A reduction in flight: MPI writes `result` (the target itself, or a host tensor), which
// is copied into `target` once complete, divided by `divisor` for an average; `input`, when
// defined, is what MPI reads. MPI cannot cancel a collective: one abandoned unfinished
// (after a failure) keeps its memory for good.
class MpiReduction final : public MpiRequest {
 public:
  MpiReduction(const MpiCommunicator& comm, std::string what, at::Tensor input, at::Tensor result,
               at::Tensor target, int divisor)
      : MpiRequest(comm),
        what_(std::move(what)),
        input_(std::move(input)),
        result_(std::move(result)),
        target_(std::move(target)),
        divisor_(divisor) {}

  ~MpiReduction() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (request_ == MPI_REQUEST_NULL || finalized) return;
    new at::Tensor(input_);  // deliberately never freed: MPI may still touch them
    new at::Tensor(result_);
  }

 private:
  void finish() override {
    if (divisor_ != 1) result_.div_(std::exchange(divisor_, 1));  // once, even if copy_ throws
    if (!result_.is_same(target_)) target_.copy_(result_);
  }

  std::string describe() const override { return what_; }

  std::string what_;
  at::Tensor input_;
  at::Tensor result_;
  at::Tensor target_;
  int divisor_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Group group = MPI_GROUP_NULL;
  MPI_Group world_group = MPI_GROUP_NULL;
  MPI_Comm_group(comm_, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> local(size_);
  std::iota(local.begin(), local.end(), 0);
  global_ranks_.resize(size_);
  MPI_Group_translate_ranks(group, size_, local.data(), world_group, global_ranks_.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
}

std::shared_ptr<MpiCommunicator> MpiCommunicator::world() {
  return std::make_shared<MpiCommunicator>(MPI_COMM_WORLD);
}

std::shared_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key) const {
  MPI_Comm part = MPI_COMM_NULL;
  check(MPI_Comm_split(comm_, color, key, &part), "MPI_Comm_split");
  return std::make_shared<MpiCommunicator>(part);
}

WorkPtr MpiCommunicator::send(const at::Tensor& tensor, int peer, int tag) {
  at::Tensor host = host_copy(tensor);
  auto work = std::make_unique<MpiWork>(*this, true, peer, tag, host, at::Tensor());
  check(MPI_Isend(host.data_ptr(), byte_count(host), MPI_BYTE, peer, tag, comm_, work->request()),
        "MPI_Isend");
  return work;
}

WorkPtr MpiCommunicator::recv(at::Tensor& tensor, int peer, int tag) {
  at::Tensor host = host_target(tensor);
  auto work = std::make_unique<MpiWork>(*this, false, peer, tag, host, tensor);
  check(MPI_Irecv(host.data_ptr(), byte_count(host), MPI_BYTE, peer, tag, comm_, work->request()),
        "MPI_Irecv");
  return work;
}

WorkPtr MpiCommunicator::all_reduce_async(at::Tensor& tensor, ReduceOp op) {
  const bool half = tensor.scalar_type() == at::kHalf || tensor.scalar_type() == at::kBFloat16;
  if (op == ReduceOp::kAverage && !at::isFloatingType(tensor.scalar_type())) {
    throw std::invalid_argument("all_reduce average needs a floating-point tensor");
  }
  at::Tensor host = half ? host_copy(tensor).to(at::kFloat) : host_copy(tensor);
  auto work = std::make_unique<MpiReduction>(
      *this, "all_reduce over " + std::to_string(size_) + " ranks", at::Tensor(), host, tensor,
      op == ReduceOp::kAverage ? size_ : 1);
  check(MPI_Iallreduce(MPI_IN_PLACE, host.data_ptr(), static_cast<int>(host.numel()),
                       reduce_datatype(host.scalar_type()),
                       op == ReduceOp::kMax ? MPI_MAX : MPI_SUM, comm_, work->request()),
        "MPI_Iallreduce");
  return work;
}

void MpiCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  all_reduce_async(tensor, op)->wait();
}

bool MpiCommunicator::starts_from_any_thread() const {
  return mpi_thread_multiple();
}

void MpiCommunicator::broadcast(at::Tensor& tensor, int root) {
  at::Tensor host = rank_ == root ? host_copy(tensor) : host_target(tensor);
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibcast(host.data_ptr(), byte_count(host), MPI_BYTE, root, comm_, &request),
        "MPI_Ibcast");
  wait_for(
      request, [&] { return "broadcast from rank " + std::to_string(global_rank(root)); },
      timeout());
  if (rank_ != root && !host.is_same(tensor)) tensor.copy_(host);
}

at::Tensor MpiCommunicator::all_gather(const at::Tensor& input) {
  const at::Tensor host = host_copy(input);
  std::vector<int64_t> shape{size_};
  shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
  at::Tensor gathered = at::empty(shape, host.options());
  MPI_Request request = MPI_REQUEST_NULL;
  const int bytes = byte_count(host);
  check(MPI_Iallgather(host.data_ptr(), bytes, MPI_BYTE, gathered.data_ptr(), bytes, MPI_BYTE,
                       comm_, &request),
        "MPI_Iallgather");
  wait_for(
      request, [this] { return "all_gather over " + std::to_string(size_) + " ranks"; }, timeout());
  return gathered.to(input.device());
}

void MpiCommunicator::all_gather_in_place(at::Tensor& blocks) {
  all_gather_in_place_async(blocks)->wait();
}

WorkPtr MpiCommunicator::all_gather_in_place_async(at::Tensor& blocks) {
  if (blocks.dim() != 1 || !blocks.is_contiguous() || blocks.numel() % size_ != 0)
    throw std::invalid_argument(
        "all_gather_in_place needs a contiguous 1-D tensor of equal blocks");
  at::Tensor host = host_copy(blocks);
  auto work = std::make_unique<MpiReduction>(
      *this, "all_gather over " + std::to_string(size_) + " ranks", at::Tensor(), host, blocks, 1);
  const int bytes = byte_count(host) / size_;
  check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host.data_ptr(), bytes, MPI_BYTE, comm_,
                       work->request()),
        "MPI_Iallgather");
  return work;
}

at::Tensor MpiCommunicator::reduce_scatter(const at::Tensor& input, ReduceOp op) {
  check_reducible(input, op, size_);
  at::Tensor block = at::empty({input.numel() / size_}, input.options());
  reduce_scatter_async(input, block, op)->wait();
  return block;
}

WorkPtr MpiCommunicator::reduce_scatter_async(const at::Tensor& input, at::Tensor& output,
                                              ReduceOp op) {
  check_reducible(input, op, size_);
  if (output.numel() != input.numel() / size_)
    throw std::invalid_argument("reduce_scatter_async needs an output of one rank's block");
  const bool half = input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16;
  const at::Tensor host = half ? host_copy(input).to(at::kFloat) : host_copy(input);
  const bool direct = !half && !output.is_cuda() && output.is_contiguous() &&
                      output.scalar_type() == host.scalar_type();
  at::Tensor block = direct ? output : at::empty({input.numel() / size_}, host.options());
  auto work = std::make_unique<MpiReduction>(
      *this, "reduce_scatter over " + std::to_string(size_) + " ranks", host, block, output,
      op == ReduceOp::kAverage ? size_ : 1);
  check(
      MPI_Ireduce_scatter_block(host.data_ptr(), block.data_ptr(), static_cast<int>(block.numel()),
                                reduce_datatype(host.scalar_type()),
                                op == ReduceOp::kMax ? MPI_MAX : MPI_SUM, comm_, work->request()),
      "MPI_Ireduce_scatter_block");
  return work;
}

void MpiCommunicator::barrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
  wait_for(
      request, [this] { return "barrier over " + std::to_string(size_) + " ranks"; }, timeout());
}

bool mpi_thread_multiple() {
  int provided = 0;
  MPI_Query_thread(&provided);
  return provided == MPI_THREAD_MULTIPLE;
}

}  // namespace pipetrain::comm
