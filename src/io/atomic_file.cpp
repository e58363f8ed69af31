#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "io/crc32.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::io {
namespace {

// The temporary file being written now, for remove_unfinished_file (a signal handler may
// read it at any moment: a fixed buffer, published by the flag).
char unfinished_path[4096];
volatile sig_atomic_t unfinished = 0;

void mark_unfinished(const std::filesystem::path& path) {
  const std::string& text = path.native();
  if (text.size() >= sizeof unfinished_path) return;
  std::memcpy(unfinished_path, text.c_str(), text.size() + 1);
  unfinished = 1;
}

// O_DIRECT transfers whole, aligned blocks: buffer address, length and file offset.
constexpr std::size_t kBlock = 4096;

std::size_t round_up(std::size_t bytes) {
  return (bytes + kBlock - 1) / kBlock * kBlock;
}

}  // namespace

void check_output_directory(const std::filesystem::path& path, std::string_view option) {
  const std::filesystem::path folder = path.parent_path().empty() ? "." : path.parent_path();
  if (!std::filesystem::is_directory(folder)) {
    throw InputError(std::string(option) + ": folder " + folder.string() + " does not exist");
  }
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw InputError(std::string(option) + ": " + path.string() +
                     " is a folder; name the file to write");
  }
  if (::access(folder.c_str(), W_OK) != 0) {
    throw InputError(std::string(option) + ": cannot write into " + folder.string() + " (" +
                     std::strerror(errno) + ")");
  }
}

AtomicFileWriter::AtomicFileWriter(const std::filesystem::path& path, std::size_t buffer_bytes)
    : path_(path),
      temporary_(path.string() + ".tmp." + std::to_string(::getpid())),
      buffer_(nullptr, std::free),
      capacity_(round_up(std::max<std::size_t>(buffer_bytes, 1))) {
  buffer_.reset(static_cast<char*>(std::aligned_alloc(kBlock, capacity_)));
  if (!buffer_) throw std::bad_alloc();
  mark_unfinished(temporary_);
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  fd_ = ::open(temporary_.c_str(), kFlags | O_DIRECT, 0644);
  direct_ = fd_ >= 0;
  if (!direct_ && errno == EINVAL) fd_ = ::open(temporary_.c_str(), kFlags, 0644);
  if (fd_ < 0) {
    const int error = errno;
    ::unlink(temporary_.c_str());  // the refused direct open may have created it
    errno = error;
    unfinished = 0;
    throw std::runtime_error("cannot create " + temporary_.string() + ": " + std::strerror(errno));
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ < 0) return;  // committed, or failed and cleaned up
  ::close(fd_);
  ::unlink(temporary_.c_str());
  unfinished = 0;
}

void AtomicFileWriter::fail(const char* what) {
  const std::string message =
      std::string(what) + " " + temporary_.string() + ": " + std::strerror(errno);
  ::close(fd_);
  fd_ = -1;
  ::unlink(temporary_.c_str());
  unfinished = 0;
  throw std::runtime_error(message);
}

void AtomicFileWriter::append(std::string_view bytes) {
  crc_ = io::crc32(bytes, crc_);
  size_ += bytes.size();
  while (!bytes.empty()) {
    const std::size_t taken = std::min(bytes.size(), capacity_ - used_);
    std::memcpy(buffer_.get() + used_, bytes.data(), taken);
    used_ += taken;
    bytes.remove_prefix(taken);
    if (used_ == capacity_) write_out(capacity_);
  }
}

void AtomicFileWriter::write_out(std::size_t bytes) {
  std::size_t written = 0;
  while (written < bytes) {
    const ssize_t n = ::write(fd_, buffer_.get() + written, bytes - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && direct_) {  // the file system takes no direct writes
      direct_ = false;
      if (::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT) != 0) fail("cannot write");
      continue;
    }
    if (n < 0) fail("cannot write");
    written += static_cast<std::size_t>(n);
  }
  used_ = 0;
}

void AtomicFileWriter::commit() {
  // A direct write ends on a whole block: zeros after the end, cut off again below.
  const std::size_t data = used_, tail = direct_ ? round_up(data) : data;
  if (tail > 0) {
    std::memset(buffer_.get() + data, 0, tail - data);
    write_out(tail);
  }
  if (tail != data && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) fail("cannot write");
  if (::fsync(fd_) != 0) fail("cannot flush");
  const bool closed = ::close(std::exchange(fd_, -1)) == 0;
  if (!closed || ::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const std::string message =
        (closed ? "cannot rename onto " + path_.string() : "cannot flush " + temporary_.string()) +
        ": " + std::strerror(errno);
    ::unlink(temporary_.c_str());
    unfinished = 0;
    throw std::runtime_error(message);
  }
  unfinished = 0;
}

void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  AtomicFileWriter file(path, std::min(contents.size(), AtomicFileWriter::kBufferBytes));
  file.append(contents);
  file.commit();
}

void remove_unfinished_file() noexcept {
  if (unfinished) ::unlink(unfinished_path);
}

}  // namespace pipetrain::io
