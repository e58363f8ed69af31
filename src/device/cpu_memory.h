#pragma once

#include <optional>

#include "device/memory_use.h"

namespace pipetrain::device {

// Puts a counting allocator in front of LibTorch's CPU allocator, once per process (later
// calls do nothing). Tensors allocated before the call are not counted, so call it before
// the model is built. Counting takes a lock and a table entry per allocation and free: for
// measuring, not for every run.
void count_cpu_memory();

// Bytes held by CPU tensors of this process since count_cpu_memory() (peak: since then);
// nothing before it.
std::optional<MemoryUse> cpu_memory();
// The peak starts again from what is held now (nothing before count_cpu_memory()).
void reset_cpu_peak();

}  // namespace pipetrain::device
