#include "io/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string>

#include "pipetrain/io/errors.h"

namespace pipetrain::io {
namespace {

// The owner's text, as written by the process holding the lock.
std::string holder_of(int fd) {
  std::array<char, 256> text{};
  const ssize_t n = ::pread(fd, text.data(), text.size() - 1, 0);
  std::string owner = n > 0 ? std::string(text.data(), static_cast<std::size_t>(n)) : "";
  while (!owner.empty() && owner.back() == '\n') owner.pop_back();
  return owner.empty() ? "unknown" : owner;
}

}  // namespace

FolderLock::FolderLock(const std::filesystem::path& folder) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  const std::filesystem::path path = folder / ".pipetrain.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw InputError(path.string() + ": cannot create the lock file: " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const bool held = errno == EWOULDBLOCK;
    const std::string holder = held ? holder_of(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (!held) return;  // a filesystem without flock (some NFS): no claim, as before
    throw InputError(folder.string() + " is in use by another job (" + holder +
                     "): wait for it, or save elsewhere");
  }
  std::array<char, 256> host{};
  ::gethostname(host.data(), host.size() - 1);
  const std::string owner =
      "host " + std::string(host.data()) + ", pid " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, owner.data(), owner.size(), 0) < 0) {
    // The claim holds without the owner's name; only a second job's message suffers.
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the flock
}

}  // namespace pipetrain::io
