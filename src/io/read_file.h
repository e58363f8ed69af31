#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace pipetrain::io {

// The whole file; InputError naming it if it cannot be read, or if it is larger than
// `max_bytes` (for text that is parsed whole: configs, manifests).
std::string read_file(const std::filesystem::path& path, std::uintmax_t max_bytes = UINTMAX_MAX);

}  // namespace pipetrain::io
