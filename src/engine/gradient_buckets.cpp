#include "pipetrain/engine/gradient_buckets.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "pipetrain/autograd/gradient_arrival.h"
#include "pipetrain/device/transport.h"

namespace pipetrain::engine {
namespace {

// Whether `work` has completed (false also when asking fails: after a failure it may not).
bool settled(comm::Work& work) {
  try {
    return work.test();
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

GradientBuckets::GradientBuckets(std::vector<at::Tensor> parameters, const std::vector<bool>& late,
                                 std::shared_ptr<comm::Communicator> data,
                                 std::shared_ptr<comm::Communicator> agree, int64_t bucket_elements,
                                 at::ScalarType wire, bool overlap)
    : parameters_(std::move(parameters)),
      data_(std::move(data)),
      agree_(std::move(agree)),
      overlap_(overlap),
      owner_(std::this_thread::get_id()),
      bucket_of_(parameters_.size()),
      last_(parameters_.size()) {
  if (late.size() != parameters_.size()) throw std::invalid_argument("one late flag per parameter");
  build(late, bucket_elements, wire);
  const bool host_staged = !buckets_.empty() && buckets_.front().flat.is_cuda() &&
                           device::transport_of(*data_) == comm::Transport::kMpi;
  any_thread_ = data_->starts_from_any_thread() && !host_staged;
  if (!overlap_) return;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (!late[i])
      autograd::set_gradient_arrival(
          parameters_[i], [this, i] { arrived(i); }, this);
  }
}

GradientBuckets::~GradientBuckets() {
  for (const auto& p : parameters_) autograd::clear_gradient_arrival(p, this);
}

void GradientBuckets::build(const std::vector<bool>& late, int64_t bucket_elements,
                            at::ScalarType wire) {
  // Backward finishes the last layers first: buckets in reverse parameter order, the
  // gradients that change after backward last.
  std::vector<std::size_t> order;
  for (bool later : {false, true}) {
    for (std::size_t i = parameters_.size(); i-- > 0;) {
      if (late[i] == later) order.push_back(i);
    }
  }
  int64_t elements = 0;
  for (std::size_t i : order) {
    const int64_t n = parameters_[i].numel();
    if (buckets_.empty() || buckets_.back().late != late[i] ||
        (elements > 0 && elements + n > bucket_elements)) {
      buckets_.emplace_back().late = late[i];
      elements = 0;
    }
    Bucket& bucket = buckets_.back();
    bucket.members.push_back(i);
    bucket.offsets.push_back(elements);
    bucket_of_[i] = buckets_.size() - 1;
    elements += n;
  }
  for (Bucket& bucket : buckets_) {
    const auto& last = parameters_[bucket.members.back()];
    const int64_t total = bucket.offsets.back() + last.numel();
    bucket.flat = at::empty({total}, last.options().dtype(wire).requires_grad(false));
  }
}

int GradientBuckets::early_buckets() const {
  return static_cast<int>(std::count_if(buckets_.begin(), buckets_.end(),
                                        [](const Bucket& bucket) { return !bucket.late; }));
}

void GradientBuckets::open() {
  if (!overlap_) return;
  const std::lock_guard lock(mutex_);
  open_ = true;
  next_ = 0;
  started_in_backward_ = 0;
  last_.open();
  for (Bucket& bucket : buckets_) bucket.pending = pending_at_open(bucket);
  if (may_start_here()) start_in_order(/*in_backward=*/false);
}

int GradientBuckets::pending_at_open(const Bucket& bucket) const {
  if (bucket.late) return kNotBefore;
  int pending = 0;
  for (std::size_t i : bucket.members) {
    if (last_.expected(i) == LastAccumulations::kUnknown) return kNotBefore;
    if (last_.expected(i) > 0) ++pending;
  }
  return pending;  // 0: every gradient in it was final already
}

void GradientBuckets::arrived(std::size_t parameter) {
  const std::lock_guard lock(mutex_);
  if (!open_) return;
  const bool last = last_.count(parameter);
  Bucket& bucket = buckets_[bucket_of_[parameter]];
  if (bucket.work) {
    bucket.regrown = true;
    return;
  }
  if (last && bucket.pending > 0) --bucket.pending;
  if (!may_start_here()) return;
  start_in_order(/*in_backward=*/true);
  progress();
}

void GradientBuckets::start_ready() {
  const std::lock_guard lock(mutex_);
  if (!open_) return;
  start_in_order(/*in_backward=*/false);
  progress();
}

bool GradientBuckets::may_start_here() const {
  return any_thread_ || std::this_thread::get_id() == owner_;
}

void GradientBuckets::start_in_order(bool in_backward) {
  while (next_ < buckets_.size() && buckets_[next_].pending == 0) {
    start(buckets_[next_]);
    ++next_;
    if (in_backward) ++started_in_backward_;
  }
}

void GradientBuckets::start(Bucket& bucket) {
  for (std::size_t k = 0; k < bucket.members.size(); ++k) {
    const at::Tensor& p = parameters_[bucket.members[k]];
    at::Tensor part = bucket.flat.narrow(0, bucket.offsets[k], p.numel());
    if (p.grad().defined()) {
      part.copy_(p.grad().reshape({-1}));
    } else {
      part.zero_();
    }
  }
  bucket.work = data_->all_reduce_async(bucket.flat, comm::ReduceOp::kAverage);
}

void GradientBuckets::progress() {
  for (std::size_t b = 0; b < next_; ++b) buckets_[b].work->test();
}

void GradientBuckets::finish() {
  const std::lock_guard lock(mutex_);
  const bool counted = std::exchange(open_, false);
  for (; next_ < buckets_.size(); ++next_) start(buckets_[next_]);
  next_ = 0;
  reduced_again_ = 0;
  if (counted) agree_on_regrown();
  for (Bucket& bucket : buckets_) {
    complete(bucket);
    copy_back(bucket);
  }
  if (counted) last_.learn();
}

void GradientBuckets::agree_on_regrown() {
  // One replica's regrown bucket is every replica's: each reduces it again.
  at::Tensor flags = at::zeros({buckets()}, at::kInt);
  auto flag = flags.accessor<int, 1>();
  for (int b = 0; b < buckets(); ++b) flag[b] = buckets_[b].regrown ? 1 : 0;
  agree_->all_reduce(flags, comm::ReduceOp::kMax);
  for (int b = 0; b < buckets(); ++b) buckets_[b].regrown = flag[b] != 0;
}

void GradientBuckets::complete(Bucket& bucket) {
  bucket.work->wait();
  if (bucket.regrown) {
    start(bucket);
    bucket.work->wait();
    bucket.regrown = false;
    ++reduced_again_;
  }
  bucket.work.reset();
}

void GradientBuckets::copy_back(Bucket& bucket) {
  for (std::size_t k = 0; k < bucket.members.size(); ++k) {
    at::Tensor& p = parameters_[bucket.members[k]];
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    at::Tensor& grad = p.mutable_grad();
    grad.copy_(bucket.flat.narrow(0, bucket.offsets[k], p.numel()).view_as(grad));
  }
}

void GradientBuckets::abandon() {
  const std::lock_guard lock(mutex_);
  open_ = false;
  next_ = 0;
  for (Bucket& bucket : buckets_) {
    if (bucket.work && !settled(*bucket.work)) bucket.flat = at::empty_like(bucket.flat);
    bucket.work.reset();
    bucket.regrown = false;
  }
}

}  // namespace pipetrain::engine
