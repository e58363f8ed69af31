#include "io/read_file.h"

#include <fstream>
#include <sstream>

#include "pipetrain/io/errors.h"

namespace pipetrain::io {

std::string read_file(const std::filesystem::path& path, std::uintmax_t max_bytes) {
  // Checked before opening: reading a FIFO or a device would block or never end.
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    throw InputError(path.string() + ": not a regular file (a folder, FIFO or device?)");
  }
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (!error && size > max_bytes) {
    throw InputError(path.string() + ": " + std::to_string(size) + " bytes, more than the " +
                     std::to_string(max_bytes) + " this file may hold");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot be read (missing?)");
  if (error || size == 0) {  // a size not known in advance (procfs says 0): read as it comes
    std::ostringstream contents;
    contents << in.rdbuf();
    return contents.str();
  }
  // One read into a buffer of the file's size (a checkpoint's layers run to gigabytes).
  std::string contents(size, '\0');
  in.read(contents.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(in.gcount()) != size)
    throw InputError(path.string() + ": " + std::to_string(in.gcount()) + " of its " +
                     std::to_string(size) + " bytes could be read (changed while reading?)");
  return contents;
}

}  // namespace pipetrain::io
