#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "pipetrain/io/errors.h"

namespace pipetrain::io {
namespace {

// The live mappings, for mapped_file_at() in a signal handler: a slot is claimed, filled,
// then published by its `begin`; withdrawn by clearing `begin` first.
struct Mapping {
  std::atomic<bool> claimed{false};
  std::atomic<const char*> begin{nullptr};
  std::size_t size = 0;
  char path[256] = {};
};
Mapping mappings[64];

void publish(const void* pages, std::size_t size, const std::filesystem::path& path) {
  for (Mapping& m : mappings) {
    bool free = false;
    if (!m.claimed.compare_exchange_strong(free, true)) continue;
    const std::string name = path.string();
    const std::size_t length = std::min(name.size(), sizeof m.path - 1);
    std::memcpy(m.path, name.data(), length);
    m.path[length] = '\0';
    m.size = size;
    m.begin.store(static_cast<const char*>(pages), std::memory_order_release);
    return;
  }
}

void withdraw(const void* pages) {
  for (Mapping& m : mappings) {
    if (m.begin.load(std::memory_order_acquire) != pages) continue;
    m.begin.store(nullptr, std::memory_order_release);
    m.claimed.store(false, std::memory_order_release);
    return;
  }
}

}  // namespace

const char* mapped_file_at(const void* address) noexcept {
  const char* at = static_cast<const char*>(address);
  for (const Mapping& m : mappings) {
    const char* begin = m.begin.load(std::memory_order_acquire);
    if (begin && at >= begin && at < begin + m.size) return m.path;
  }
  return nullptr;
}

MappedFile::MappedFile(const std::filesystem::path& path, Access access, Pages pages)
    : path_(path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw InputError(path.string() + ": cannot be read (missing?)");
  struct stat status {};
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(fd);
    throw InputError(path.string() + ": not a regular file (a folder, FIFO or device?)");
  }
  size_ = static_cast<std::size_t>(status.st_size);
  if (size_ > 0) {
    // Copy-on-write pages are not reserved (MAP_NORESERVE): a file larger than memory maps.
    void* mapped = pages == Pages::kReadOnly ? ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0)
                                             : ::mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                                                      MAP_PRIVATE | MAP_NORESERVE, fd, 0);
    if (mapped == MAP_FAILED) {
      ::close(fd);
      throw InputError(path.string() + ": cannot be mapped into memory");
    }
    pages_ = mapped;
    ::madvise(pages_, size_, access == Access::kRandom ? MADV_RANDOM : MADV_SEQUENTIAL);
    publish(pages_, size_, path_);
  }
  ::close(fd);  // the mapping stays
}

MappedFile::~MappedFile() {
  if (!pages_) return;
  withdraw(pages_);
  ::munmap(pages_, size_);
}

}  // namespace pipetrain::io
