#include "data_parallel/gradient_buckets.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "autograd/gradient_arrival.h"
#include "pipetrain/device/transport.h"

namespace pipetrain::data_parallel {

GradientBuckets::GradientBuckets(std::vector<at::Tensor> parameters, const std::vector<bool>& late,
                                 std::shared_ptr<BucketReduction> reduction,
                                 std::shared_ptr<comm::Communicator> data,
                                 std::shared_ptr<comm::Communicator> agree, bool overlap)
    : parameters_(std::move(parameters)),
      reduction_(std::move(reduction)),
      data_(std::move(data)),
      agree_(std::move(agree)),
      overlap_(overlap),
      owner_(std::this_thread::get_id()),
      bucket_of_(parameters_.size()),
      last_(parameters_.size()) {
  if (late.size() != parameters_.size()) throw std::invalid_argument("one late flag per parameter");
  std::vector<bool> placed(parameters_.size(), false);
  for (const auto& members : reduction_->buckets()) {
    Bucket& bucket = buckets_.emplace_back();
    bucket.members = members;
    bucket.late = !members.empty() && late.at(members.front());
    for (std::size_t i : members) {
      if (i >= parameters_.size() || placed[i] || late[i] != bucket.late)
        throw std::invalid_argument("buckets must hold each parameter once, late ones apart");
      placed[i] = true;
      bucket_of_[i] = buckets_.size() - 1;
    }
  }
  if (std::find(placed.begin(), placed.end(), false) != placed.end())
    throw std::invalid_argument("a parameter in no gradient bucket");
  const bool host_staged = !parameters_.empty() && parameters_.front().is_cuda() &&
                           data_->transport() == comm::Transport::kMpi;
  any_thread_ = data_->starts_from_any_thread() && !host_staged;
  if (!overlap_) return;
  try {
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      if (!late[i])
        autograd::set_gradient_arrival(
            parameters_[i], [this, i] { arrived(i); }, this);
    }
  } catch (...) {  // no hook may outlive this
    for (const auto& p : parameters_) autograd::clear_gradient_arrival(p, this);
    throw;
  }
}

GradientBuckets::~GradientBuckets() {
  for (const auto& p : parameters_) autograd::clear_gradient_arrival(p, this);
}

int GradientBuckets::early_buckets() const {
  return static_cast<int>(std::count_if(buckets_.begin(), buckets_.end(),
                                        [](const Bucket& bucket) { return !bucket.late; }));
}

void GradientBuckets::open() {
  const std::lock_guard lock(mutex_);
  started_in_backward_ = 0;
  if (!overlap_ || !hooks_held()) return;
  open_ = true;
  next_ = 0;
  last_.open();
  for (Bucket& bucket : buckets_) bucket.pending = pending_at_open(bucket);
  if (may_start_here()) start_in_order(/*in_backward=*/false);
}

bool GradientBuckets::hooks_held() const {
  // Another GradientBuckets over the same parameters took the hooks: without arrivals,
  // this one would take every gradient for final at once. It reduces after backward.
  for (const Bucket& bucket : buckets_) {
    if (bucket.late) continue;
    for (std::size_t i : bucket.members) {
      if (!autograd::has_gradient_arrival(parameters_[i], this)) return false;
    }
  }
  return true;
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
    start(next_);
    ++next_;
    if (in_backward) ++started_in_backward_;
  }
}

void GradientBuckets::start(std::size_t k) {
  buckets_[k].work = reduction_->start(static_cast<int>(k));
}

void GradientBuckets::progress() {
  for (std::size_t b = 0; b < next_; ++b) buckets_[b].work->test();
}

void GradientBuckets::finish() {
  const std::lock_guard lock(mutex_);
  const bool counted = std::exchange(open_, false);
  for (; next_ < buckets_.size(); ++next_) start(next_);
  next_ = 0;
  reduced_again_ = 0;
  if (overlap_) agree_on_regrown();  // on every replica, even one whose window did not open
  for (std::size_t k = 0; k < buckets_.size(); ++k) complete(k);
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

void GradientBuckets::complete(std::size_t k) {
  Bucket& bucket = buckets_[k];
  bucket.work->wait();
  if (bucket.regrown) {
    start(k);
    bucket.work->wait();
    bucket.regrown = false;
    ++reduced_again_;
  }
  bucket.work.reset();
  reduction_->complete(static_cast<int>(k));
}

void GradientBuckets::abandon() {
  const std::lock_guard lock(mutex_);
  open_ = false;
  next_ = 0;
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& bucket = buckets_[k];
    if (bucket.work && !comm::settled(*bucket.work)) reduction_->abandon(static_cast<int>(k));
    bucket.work.reset();
    bucket.regrown = false;
  }
}

}  // namespace pipetrain::data_parallel
