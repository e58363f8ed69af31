#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace pipetrain::io {

// A whole regular file mapped into memory, private to this process: pages are read from
// the file on first touch, and writes to them (copy on write) never reach the file.
class MappedFile {
 public:
  // How the pages will be read, for the kernel's read-ahead.
  enum class Access { kSequential, kRandom };

  // InputError naming the file if it is missing, not a regular file, or cannot be mapped.
  MappedFile(const std::filesystem::path& path, Access access);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::size_t size() const { return size_; }
  std::string_view bytes() const { return {static_cast<const char*>(pages_), size_}; }
  // The mapped pages themselves (nullptr for an empty file); writes stay in this process.
  void* pages() const { return pages_; }

 private:
  std::filesystem::path path_;
  void* pages_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace pipetrain::io
