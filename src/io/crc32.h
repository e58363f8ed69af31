#pragma once

#include <cstdint>
#include <string_view>

namespace pipetrain::io {

// CRC-32 (IEEE) of the bytes, for checksums in manifests. `previous` continues an earlier
// result: crc32(b, crc32(a)) == crc32(a + b).
uint32_t crc32(std::string_view bytes, uint32_t previous = 0);

}  // namespace pipetrain::io
