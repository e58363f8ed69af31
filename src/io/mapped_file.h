#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace pipetrain::io {

// A whole regular file mapped into memory: pages are read from the file on first touch.
class MappedFile {
 public:
  // How the pages will be read, for the kernel's read-ahead.
  enum class Access { kSequential, kRandom };
  // kReadOnly: writing faults. kCopyOnWrite: writes make private copies of the pages and
  // never reach the file (nothing is reserved for them up front).
  enum class Pages { kReadOnly, kCopyOnWrite };

  // InputError naming the file if it is missing, not a regular file, or cannot be mapped.
  MappedFile(const std::filesystem::path& path, Access access, Pages pages = Pages::kReadOnly);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::size_t size() const { return size_; }
  std::string_view bytes() const { return {static_cast<const char*>(pages_), size_}; }
  // The mapped pages themselves (nullptr for an empty file).
  void* pages() const { return pages_; }

 private:
  std::filesystem::path path_;
  void* pages_ = nullptr;
  std::size_t size_ = 0;
};

// The path of the live MappedFile whose pages hold `address` (the first 255 bytes of it),
// else nullptr: what a SIGBUS handler names when a mapped file shrank under the job (its
// pages past the new end fault). At most 64 mappings are known. Async-signal-safe.
const char* mapped_file_at(const void* address) noexcept;

}  // namespace pipetrain::io
