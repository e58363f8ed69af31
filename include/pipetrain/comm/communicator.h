#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "pipetrain/comm/deadline.h"
#include "pipetrain/comm/transport_choice.h"

namespace pipetrain::comm {

enum class ReduceOp { kSum, kAverage, kMax };

// An operation in flight. wait() blocks until it completes, at most the communicator's
// timeout, and throws DeadlineExceeded after that.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Whether the work has completed, without blocking (and moving it along: MPI progresses
  // transfers only inside its calls); after true, wait() returns at once.
  virtual bool test() = 0;
};
using WorkPtr = std::unique_ptr<Work>;

// Whether `work` has completed (false also when asking fails: after a failure it may not).
bool settled(Work& work);

// A group of ranks that exchange tensors. Tensors passed to send() and recv() must stay
// alive and untouched until the returned work is waited for; recv() fills a tensor the
// caller allocated with the sender's dtype and shape. Collectives block (with deadline).
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The job-wide rank of a member, for messages.
  virtual int global_rank(int rank) const = 0;
  // How it moves tensors (a wrapper answers for what it wraps).
  virtual Transport transport() const = 0;

  virtual WorkPtr send(const at::Tensor& tensor, int peer, int tag) = 0;
  virtual WorkPtr recv(at::Tensor& tensor, int peer, int tag) = 0;
  virtual void all_reduce(at::Tensor& tensor, ReduceOp op) = 0;
  // all_reduce() started: `tensor` holds the result once the work completes and must stay
  // alive and untouched until then. Every rank starts its collectives in the same order.
  virtual WorkPtr all_reduce_async(at::Tensor& tensor, ReduceOp op) = 0;
  // Whether a thread other than the one that made the communicator may start operations
  // (autograd runs CUDA backward on threads of its own).
  virtual bool starts_from_any_thread() const = 0;
  virtual void broadcast(at::Tensor& tensor, int root) = 0;
  // Every rank's `input` stacked along a new first dimension, in rank order.
  virtual at::Tensor all_gather(const at::Tensor& input) = 0;
  // In place: `blocks` (1-D, contiguous, size() equal blocks) holds this rank's values in
  // block rank(); afterwards every block holds its rank's.
  virtual void all_gather_in_place(at::Tensor& blocks) = 0;
  // all_gather_in_place() started: `blocks` holds every rank's block once the work
  // completes, and must stay alive and untouched until then.
  virtual WorkPtr all_gather_in_place_async(at::Tensor& blocks) = 0;
  // The element-wise reduction of every rank's `input` (1-D, size() x n elements), of
  // which this rank gets block rank() (n elements), in `input`'s dtype and device.
  virtual at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op) = 0;
  // reduce_scatter() started: `output` (n elements, contiguous, `input`'s dtype and device)
  // holds this rank's block once the work completes; both must stay alive until then.
  virtual WorkPtr reduce_scatter_async(const at::Tensor& input, at::Tensor& output,
                                       ReduceOp op) = 0;
  virtual void barrier() = 0;
  // One exchange with every rank: outgoing[r] goes to rank r and incoming[r] (allocated by
  // the caller, contiguous, of what rank r sends) comes from it; this rank's own is
  // copied, empty tensors are skipped. Blocks until done (stream-ordered on a GPU). This
  // default starts every receive and send, then waits for each (MPI); NCCL groups them.
  virtual void all_to_all(const std::vector<at::Tensor>& outgoing,
                          std::vector<at::Tensor>& incoming, int tag);

  Seconds timeout() const { return timeout_; }
  void set_timeout(Seconds timeout) { timeout_ = timeout; }

 private:
  Seconds timeout_ = default_timeout();
};

// Throws std::invalid_argument unless `input` can be reduce-scattered by `op` over `ranks`
// (1-D, a whole number of elements per rank, floating point for an average).
void check_reducible(const at::Tensor& input, ReduceOp op, int ranks);

// Every rank's `text`, in rank order (two all-gathers: lengths, then padded bytes).
std::vector<std::string> all_gather_text(Communicator& comm, const std::string& text);

}  // namespace pipetrain::comm
