#include "device/cpu_memory.h"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace pipetrain::device {
namespace {

// Forwards to the allocator it replaced and counts the bytes its blocks hold. A block's
// context is its own address, as LibTorch's raw_allocate requires, so the inner block and
// its size are found in a table when LibTorch frees it (one mutex: counting is for
// measuring, not for every run).
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(std::size_t bytes) override {
    c10::DataPtr inner = inner_->allocate(bytes);
    void* data = inner.get();
    const c10::Device device = inner.device();
    if (data == nullptr) return inner;  // zero bytes: nothing to count
    std::lock_guard lock(mutex_);
    blocks_.emplace(data, Block{std::move(inner), static_cast<int64_t>(bytes)});
    allocated_ += static_cast<int64_t>(bytes);
    peak_ = std::max(peak_, allocated_);
    return {data, data, &release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  MemoryUse counts() const {
    std::lock_guard lock(mutex_);
    return {allocated_, peak_};
  }

  void reset_peak() {
    std::lock_guard lock(mutex_);
    peak_ = allocated_;
  }

 private:
  struct Block {
    c10::DataPtr inner;
    int64_t bytes;
  };

  static void release(void* data);

  c10::Allocator* inner_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;
  int64_t allocated_ = 0;
  int64_t peak_ = 0;
};

CountingAllocator* counter = nullptr;  // never freed: blocks may outlive any scope
std::once_flag installed;

void CountingAllocator::release(void* data) {
  c10::DataPtr inner;  // freed through its own deleter once the lock is released
  {
    std::lock_guard lock(counter->mutex_);
    const auto block = counter->blocks_.find(data);
    if (block == counter->blocks_.end()) {  // raw-allocated before counting began
      counter->inner_->raw_deallocate(data);
      return;
    }
    inner = std::move(block->second.inner);
    counter->allocated_ -= block->second.bytes;
    counter->blocks_.erase(block);
  }
}

}  // namespace

void count_cpu_memory() {
  std::call_once(installed, [] {
    counter = new CountingAllocator(c10::GetCPUAllocator());
    // Priority above the default allocator's, so that this one is used from now on.
    c10::SetCPUAllocator(counter, /*priority=*/1);
  });
}

std::optional<MemoryUse> cpu_memory() {
  if (!counter) return std::nullopt;
  return counter->counts();
}

void reset_cpu_peak() {
  if (counter) counter->reset_peak();
}

}  // namespace pipetrain::device
