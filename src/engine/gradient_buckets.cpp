#include "pipetrain/engine/gradient_buckets.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "pipetrain/autograd/gradient_arrival.h"

namespace pipetrain::engine {

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
      expected_(parameters_.size(), -1),
      arrivals_(parameters_.size(), 0) {
  if (late.size() != parameters_.size()) throw std::invalid_argument("one late flag per parameter");
  build(late, bucket_elements, wire);
  if (!overlap_) return;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (!late[i]) autograd::set_gradient_arrival(parameters_[i], [this, i] { arrived(i); });
  }
}

GradientBuckets::~GradientBuckets() {
  if (!overlap_) return;
  for (const auto& p : parameters_) autograd::clear_gradient_arrival(p);
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
    int64_t total = 0;
    for (std::size_t i : bucket.members) total += parameters_[i].numel();
    const auto& first = parameters_[bucket.members.front()];
    bucket.flat = at::empty({total}, first.options().dtype(wire).requires_grad(false));
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
  started_early_ = 0;
  std::fill(arrivals_.begin(), arrivals_.end(), 0);
  for (Bucket& bucket : buckets_) {
    bucket.work.reset();  // left by a step that failed
    bucket.regrown = false;
    bucket.pending = 0;
    for (std::size_t i : bucket.members) {
      if (bucket.late || expected_[i] < 0) bucket.pending = -1;
      if (bucket.pending >= 0 && expected_[i] > 0) ++bucket.pending;
    }
  }
  if (may_start_here()) start_in_order();
}

void GradientBuckets::arrived(std::size_t parameter) {
  const std::lock_guard lock(mutex_);
  if (!open_) return;
  Bucket& bucket = buckets_[bucket_of_[parameter]];
  ++arrivals_[parameter];
  if (bucket.work) {
    bucket.regrown = true;
    return;
  }
  if (bucket.pending > 0 && arrivals_[parameter] == expected_[parameter]) --bucket.pending;
  if (!may_start_here()) return;
  start_in_order();
  // MPI moves a collective along only inside its calls: a test per arrival.
  for (std::size_t b = 0; b < next_; ++b) buckets_[b].work->test();
}

void GradientBuckets::start_ready() {
  const std::lock_guard lock(mutex_);
  if (open_) start_in_order();
}

bool GradientBuckets::may_start_here() const {
  return data_->starts_from_any_thread() || std::this_thread::get_id() == owner_;
}

void GradientBuckets::start_in_order() {
  while (next_ < buckets_.size() && buckets_[next_].pending == 0) {
    start(buckets_[next_++]);
    ++started_early_;
  }
}

void GradientBuckets::start(Bucket& bucket) {
  for (std::size_t k = 0; k < bucket.members.size(); ++k) {
    const at::Tensor& grad = parameters_[bucket.members[k]].grad();
    at::Tensor part =
        bucket.flat.narrow(0, bucket.offsets[k], parameters_[bucket.members[k]].numel());
    if (grad.defined()) {
      part.copy_(grad.reshape({-1}));
    } else {
      part.zero_();
    }
  }
  bucket.work = data_->all_reduce_async(bucket.flat, comm::ReduceOp::kAverage);
}

void GradientBuckets::finish() {
  const std::lock_guard lock(mutex_);
  const bool counted = std::exchange(open_, false);
  while (next_ < buckets_.size()) start(buckets_[next_++]);
  next_ = 0;
  reduced_again_ = 0;
  if (counted) agree_on_regrown();
  for (Bucket& bucket : buckets_) {
    bucket.work->wait();
    if (bucket.regrown) {
      start(bucket);
      bucket.work->wait();
      ++reduced_again_;
      bucket.regrown = false;
    }
    bucket.work.reset();
    for (std::size_t k = 0; k < bucket.members.size(); ++k) {
      at::Tensor& p = parameters_[bucket.members[k]];
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      at::Tensor& grad = p.mutable_grad();
      grad.copy_(bucket.flat.narrow(0, bucket.offsets[k], p.numel()).view_as(grad));
    }
  }
  if (counted) expected_ = arrivals_;
}

void GradientBuckets::agree_on_regrown() {
  // One replica's regrown bucket is every replica's: each reduces it again.
  at::Tensor flags = at::zeros({buckets()}, at::kInt);
  auto flag = flags.accessor<int, 1>();
  for (int b = 0; b < buckets(); ++b) flag[b] = buckets_[b].regrown ? 1 : 0;
  agree_->all_reduce(flags, comm::ReduceOp::kMax);
  for (int b = 0; b < buckets(); ++b) buckets_[b].regrown = flag[b] != 0;
}

}  // namespace pipetrain::engine
