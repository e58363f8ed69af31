#pragma once

#include <cstdint>

namespace pipetrain::device {

// Bytes held by a device's tensors, as its allocator counts them.
struct MemoryUse {
  int64_t allocated = 0;       // held by tensors now
  int64_t peak_allocated = 0;  // the most held at once since the last reset (or the start)
};

}  // namespace pipetrain::device
