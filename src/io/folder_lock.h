#pragma once

#include <filesystem>

namespace pipetrain::io {

// An exclusive claim on a folder by this process: flock on FOLDER/.pipetrain.lock, whose
// text names the owner's host and pid. Released when the object goes or the process ends,
// however it ends (the kernel drops the lock), so a crashed job never leaves it held. On a
// filesystem without flock (some NFS mounts) there is no claim, and no error.
class FolderLock {
 public:
  // Creates the folder if needed. InputError naming the holder ("host H, pid P") when
  // another process holds the claim, or naming the path when the lock file cannot be made.
  explicit FolderLock(const std::filesystem::path& folder);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace pipetrain::io
