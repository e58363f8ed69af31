#pragma once

#include <cstdint>
#include <string_view>

namespace pipetrain::io {

// CRC-32 (IEEE) of the bytes, for checksums in manifests.
uint32_t crc32(std::string_view bytes);

}  // namespace pipetrain::io
