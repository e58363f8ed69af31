#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "data_parallel/bucket_reduction.h"
#include "data_parallel/last_accumulations.h"
#include "pipetrain/comm/communicator.h"

namespace pipetrain::data_parallel {

// When each gradient bucket is reduced over the data-parallel replicas (how: a
// BucketReduction, which also says which parameters each bucket holds, in the order
// backward finishes them).
//
// With overlap, a bucket's reduction starts during the step's last backward passes, as
// soon as every gradient in it is final (LastAccumulations says when; the first step
// reduces after backward, and counts), and runs while backward goes on. Buckets start in
// order, so every replica starts the same collectives in the same order. A gradient that
// grows after its bucket started (a graph that changed) is caught: the replicas agree on
// such buckets in finish() and reduce them again, so the result never rests on the count.
class GradientBuckets {
 public:
  // `late`: per parameter, whether its gradient still changes after backward (tied
  // parameters, first summed among their stages); a bucket of such ones is reduced in
  // finish() only. `data` is the communicator `reduction` uses (which threads may start
  // it); `agree` (host tensors, the same ranks) agrees on regrown buckets.
  GradientBuckets(std::vector<at::Tensor> parameters, const std::vector<bool>& late,
                  std::shared_ptr<BucketReduction> reduction,
                  std::shared_ptr<comm::Communicator> data,
                  std::shared_ptr<comm::Communicator> agree, bool overlap);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // The step's last backward passes begin. Without overlap: nothing.
  void open();
  // Starts what became ready on a thread that could not start it (see may_start_here()),
  // and moves started reductions along.
  void start_ready();
  // Every bucket reduced, waited for and completed (see BucketReduction); the window
  // closes.
  void finish();
  // Forgets a step that ended before finish() (it threw): the window closes, and a
  // reduction still in flight is abandoned (its buffers are not used again).
  void abandon();

  int buckets() const { return static_cast<int>(buckets_.size()); }
  // Buckets that may start before finish(): all but those of late gradients.
  int early_buckets() const;
  // Of the last step: buckets started by an arrival inside a backward pass, and buckets
  // reduced a second time in finish().
  int started_in_backward() const { return started_in_backward_; }
  int reduced_again() const { return reduced_again_; }

 private:
  static constexpr int kNotBefore = -1;  // Bucket::pending: waits for finish()

  struct Bucket {
    std::vector<std::size_t> members;  // parameter indices
    bool late = false;
    int pending = kNotBefore;  // members whose last accumulation is still to come
    comm::WorkPtr work;
    bool regrown = false;  // a member's gradient grew after the bucket started
  };

  bool hooks_held() const;
  int pending_at_open(const Bucket& bucket) const;
  void arrived(std::size_t parameter);
  // Starting on autograd's CUDA thread is for communicators that allow it and do not copy
  // through the host there (which would hold up the kernels backward still queues).
  bool may_start_here() const;
  // With mutex_ held from here on.
  void start_in_order(bool in_backward);
  void start(std::size_t k);
  void progress();  // MPI moves a collective along only inside its calls
  void agree_on_regrown();
  void complete(std::size_t k);

  std::vector<at::Tensor> parameters_;
  std::shared_ptr<BucketReduction> reduction_;
  std::shared_ptr<comm::Communicator> data_;
  std::shared_ptr<comm::Communicator> agree_;
  bool overlap_;
  std::thread::id owner_;
  bool any_thread_ = false;  // may start from another thread than owner_
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // per parameter
  LastAccumulations last_;

  std::mutex mutex_;  // autograd may call arrived() from its own thread
  bool open_ = false;
  std::size_t next_ = 0;  // the next bucket to start
  int started_in_backward_ = 0;
  int reduced_again_ = 0;
};

}  // namespace pipetrain::data_parallel
