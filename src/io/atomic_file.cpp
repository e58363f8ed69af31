#include "pipetrain/io/atomic_file.h"

#include "pipetrain/io/errors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pipetrain::io {
namespace {

// The temporary file being written now, for remove_unfinished_file (a signal handler may
// read it at any moment: a fixed buffer, published by the flag).
char unfinished_path[4096];
volatile sig_atomic_t unfinished = 0;

class Unfinished {
 public:
  explicit Unfinished(const std::filesystem::path& path) {
    const std::string& text = path.native();
    if (text.size() >= sizeof unfinished_path) return;
    std::memcpy(unfinished_path, text.c_str(), text.size() + 1);
    unfinished = 1;
  }
  ~Unfinished() { unfinished = 0; }
  Unfinished(const Unfinished&) = delete;
  Unfinished& operator=(const Unfinished&) = delete;
};

[[noreturn]] void io_failure(const std::string& what, const std::filesystem::path& path) {
  throw std::runtime_error(what + " " + path.string() + ": " + std::strerror(errno));
}

}  // namespace

void check_output_directory(const std::filesystem::path& path, std::string_view option) {
  const std::filesystem::path folder = path.parent_path().empty() ? "." : path.parent_path();
  if (!std::filesystem::is_directory(folder)) {
    throw InputError(std::string(option) + ": folder " + folder.string() + " does not exist");
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  const std::filesystem::path temporary = path.string() + ".tmp." + std::to_string(::getpid());
  const Unfinished unfinished_file(temporary);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_failure("cannot create", temporary);
  std::size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      ::unlink(temporary.c_str());
      io_failure("cannot write", temporary);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(temporary.c_str());
    io_failure("cannot flush", temporary);
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    ::unlink(temporary.c_str());
    io_failure("cannot rename onto", path);
  }
}

void remove_unfinished_file() noexcept {
  if (unfinished) ::unlink(unfinished_path);
}

}  // namespace pipetrain::io
