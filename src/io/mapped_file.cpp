#include "pipetrain/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipetrain/io/errors.h"

namespace pipetrain::io {

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
  }
  ::close(fd);  // the mapping stays
}

MappedFile::~MappedFile() {
  if (pages_) ::munmap(pages_, size_);
}

}  // namespace pipetrain::io
