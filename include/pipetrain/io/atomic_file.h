#pragma once

#include <filesystem>
#include <string_view>

namespace pipetrain::io {

// Writes `contents` to a temporary file beside `path`, flushes it to disk and renames it
// over `path`: readers see the old file or the whole new one, never a partial write.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

// Async-signal-safe: removes the temporary file of a write_file_atomically in progress on
// this process, if any (a signal handler calls it before the process dies).
void remove_unfinished_file() noexcept;

// Throws InputError naming `option` unless the folder that will hold `path` exists.
void check_output_directory(const std::filesystem::path& path, std::string_view option);

}  // namespace pipetrain::io
