#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "pipetrain/comm/communicator.h"

namespace pipetrain::engine {

// Averages a stage's gradients over its data-parallel replicas in flat buckets of at most
// `bucket_elements`, filled in reverse parameter order: the order backward finishes them.
//
// With overlap, a bucket's all-reduce starts during the step's last backward passes, as
// soon as every gradient in it is final, and runs while backward goes on. Which
// accumulation is a parameter's last is learned: open() marks where the last backward
// passes begin, and a parameter is final after as many accumulations from there as in the
// step before (the first step reduces after backward, and counts). Buckets start in
// order, so every replica starts the same collectives in the same order. A gradient that
// grows after its bucket started (a graph that changed) is caught: the replicas agree on
// such buckets in finish() and reduce them again, so the result never rests on the count.
class GradientBuckets {
 public:
  // `late`: per parameter, whether its gradient still changes after backward (tied
  // parameters, first summed among their stages): reduced in finish() only. `data`
  // averages the gradients; `agree` (host tensors, the same ranks) agrees on regrown ones.
  GradientBuckets(std::vector<at::Tensor> parameters, const std::vector<bool>& late,
                  std::shared_ptr<comm::Communicator> data,
                  std::shared_ptr<comm::Communicator> agree, int64_t bucket_elements,
                  at::ScalarType wire, bool overlap);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // The step's last backward passes begin. Without overlap: nothing.
  void open();
  // Starts what became ready on a thread that may not start collectives (autograd's CUDA
  // thread with an MPI communicator that allows one thread only).
  void start_ready();
  // Every bucket reduced and waited for, each gradient replaced by its average; the
  // window closes. A parameter without a gradient gets the average of zeros and others'.
  void finish();

  int buckets() const { return static_cast<int>(buckets_.size()); }
  // Buckets that may start before finish(): all but those of late gradients.
  int early_buckets() const;
  // Of the last finish(): buckets started before it, and buckets reduced a second time.
  int started_early() const { return started_early_; }
  int reduced_again() const { return reduced_again_; }

 private:
  struct Bucket {
    std::vector<std::size_t> members;  // parameter indices, in bucket order
    std::vector<int64_t> offsets;      // of each member in `flat`
    at::Tensor flat;                   // in the wire dtype
    bool late = false;
    int pending = -1;  // members not yet final; -1: unknown (never started early)
    comm::WorkPtr work;
    bool regrown = false;  // a member's gradient grew after the bucket started
  };

  void build(const std::vector<bool>& late, int64_t bucket_elements, at::ScalarType wire);
  void arrived(std::size_t parameter);
  bool may_start_here() const;
  void start_in_order();  // with mutex_ held
  void start(Bucket& bucket);
  void agree_on_regrown();

  std::vector<at::Tensor> parameters_;
  std::shared_ptr<comm::Communicator> data_;
  std::shared_ptr<comm::Communicator> agree_;
  bool overlap_;
  std::thread::id owner_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // per parameter
  std::vector<int> expected_;           // per parameter: accumulations in the window; -1 unknown
  std::vector<int> arrivals_;           // per parameter, in this step's window

  std::mutex mutex_;  // autograd may call arrived() from its own thread
  bool open_ = false;
  std::size_t next_ = 0;  // the next bucket to start
  int started_early_ = 0;
  int reduced_again_ = 0;
};

}  // namespace pipetrain::engine
