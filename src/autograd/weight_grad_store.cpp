#include "autograd/weight_grad_store.h"

#include <atomic>

namespace pipetrain::autograd {
namespace {

std::atomic<WeightGradStore*> current_store{nullptr};
std::atomic<int> splittable_scopes{0};

}  // namespace

WeightGradStore::WeightGradStore(WeightGradStore&& other) noexcept {
  const std::lock_guard lock(other.mutex_);
  deferred_ = std::move(other.deferred_);
}

WeightGradStore& WeightGradStore::operator=(WeightGradStore&& other) noexcept {
  if (this == &other) return *this;
  const std::scoped_lock lock(mutex_, other.mutex_);
  deferred_ = std::move(other.deferred_);
  return *this;
}

void WeightGradStore::defer(std::function<void()> compute) {
  const std::lock_guard lock(mutex_);
  deferred_.push_back(std::move(compute));
}

void WeightGradStore::run() {
  std::vector<std::function<void()>> deferred;
  {
    const std::lock_guard lock(mutex_);
    deferred.swap(deferred_);
  }
  for (auto& compute : deferred) compute();
}

bool WeightGradStore::empty() const {
  const std::lock_guard lock(mutex_);
  return deferred_.empty();
}

void WeightGradStore::clear() {
  const std::lock_guard lock(mutex_);
  deferred_.clear();
}

DeferWeightGrads::DeferWeightGrads(WeightGradStore& store)
    : previous_(current_store.exchange(&store)) {}

DeferWeightGrads::~DeferWeightGrads() {
  current_store.store(previous_);
}

WeightGradStore* deferring_store() {
  return current_store.load();
}

SplittableBackward::SplittableBackward() {
  ++splittable_scopes;
}

SplittableBackward::~SplittableBackward() {
  --splittable_scopes;
}

bool recording_splittable() {
  return splittable_scopes.load() > 0 || current_store.load() != nullptr;
}

}  // namespace pipetrain::autograd
