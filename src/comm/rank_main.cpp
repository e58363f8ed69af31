#include "pipetrain/comm/rank_main.h"

#include <ATen/Parallel.h>
#include <mpi.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include "comm/job_failure.h"
#include "comm/stop_signals.h"
#include "io/rank_record.h"
#include "pipetrain/comm/deadline.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::comm {
namespace {

int positive_env(const char* name) {
  const char* text = std::getenv(name);
  if (!text || !*text) return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 1) {
    throw io::InputError(std::string(name) + " must be a positive integer, got '" + text + "'");
  }
  return static_cast<int>(value);
}

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int ranks_on_this_host() {
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int size = 1;
  MPI_Comm_size(local, &size);
  MPI_Comm_free(&local);
  return size;
}

// `alone`: a job of one rank, which has no others to abort (MPI_Abort would add its
// banner to the one line). Otherwise end_job:
// communicators that need their peers to end are left as they are (see job_failure.h).
[[noreturn]] void abort_job(const char* what, int exit_code, bool alone = false) {
  if (!alone) end_job(what, exit_code);
  std::fprintf(stderr, "pipetrain: %s: %s\n", rank_identity().c_str(), what);
  std::fflush(stderr);
  io::record_exit(exit_code);
  MPI_Finalize();
  std::_Exit(exit_code);
}

}  // namespace

int intra_op_threads(int cores, int local_ranks) {
  if (const int threads = positive_env("PIPETRAIN_THREADS")) return threads;
  if (const int threads = positive_env("OMP_NUM_THREADS")) return threads;
  return std::max(1, cores / std::max(1, local_ranks));
}

namespace {

bool& rank_started() {
  static bool started = false;
  return started;
}

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// MPI and the rank's identity; false if MPI would not start.
bool initialise(int* argc, char*** argv) {
  int provided = 0;
  // Multiple: a stage's deferred sends progress on a helper thread (see engine::TransferProgress);
  // with less, they progress in the main thread's MPI calls only.
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return false;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  io::open_rank_record(world_rank());
  set_rank_identity("rank " + std::to_string(world_rank()));
  install_stop_handlers();
  return true;
}

}  // namespace

void start_rank() {
  if (rank_started()) return;
  if (!initialise(nullptr, nullptr)) throw std::runtime_error("MPI_Init_thread failed");
  rank_started() = true;
  at::set_num_threads(intra_op_threads(usable_cores(), ranks_on_this_host()));
}

void fail_rank(const std::exception& error) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (!up || down) {  // MPI would not start (start_rank), or has ended: this process alone
    const bool input = dynamic_cast<const io::InputError*>(&error) != nullptr;
    end_job(input ? error.what() : io::error_message(error), input ? 2 : 1);
  }
  if (dynamic_cast<const io::InputError*>(&error)) {
    // Bad input usually fails on every rank alike: rank 0 speaks first and its abort ends
    // the others before they repeat the same line.
    if (world_rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    abort_job(error.what(), 2, /*alone=*/world_size() == 1);
  }
  abort_job(io::error_message(error).c_str(), 1, /*alone=*/world_size() == 1);
}

void finish_rank() {
  if (!rank_started()) return;
  rank_started() = false;
  MPI_Finalize();
}

int run_rank(int argc, char** argv, const std::function<int()>& body) {
  if (!initialise(&argc, &argv)) {
    std::fprintf(stderr, "pipetrain: MPI_Init_thread failed\n");
    return 1;
  }
  std::set_terminate([] { abort_job("terminated without an exception to report", 1); });

  int exit_code = 0;
  try {
    at::set_num_threads(intra_op_threads(usable_cores(), ranks_on_this_host()));
    exit_code = body();
  } catch (const std::exception& e) {
    fail_rank(e);
  }
  MPI_Finalize();
  io::record_exit(exit_code);
  return exit_code;
}

}  // namespace pipetrain::comm
