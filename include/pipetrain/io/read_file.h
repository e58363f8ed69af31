#pragma once

#include <filesystem>
#include <string>

namespace pipetrain::io {

// The whole file; InputError naming it if it cannot be read.
std::string read_file(const std::filesystem::path& path);

}  // namespace pipetrain::io
