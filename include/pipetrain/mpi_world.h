#pragma once

#include <mpi.h>

namespace pipetrain {

// Owns MPI's lifetime in one process: initialises it (with thread support for the
// communication watchdog) and finalises it on destruction.
class MpiWorld {
 public:
  MpiWorld(int* argc, char*** argv);
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return MPI_COMM_WORLD; }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace pipetrain
