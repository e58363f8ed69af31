#pragma once

#include <exception>
#include <functional>

namespace pipetrain::comm {

// Runs `body` as one rank of an MPI job, however it was started (pipetrain launch,
// mpirun, srun): initialises MPI, sets the rank identity for error messages and the
// intra-op threads (PIPETRAIN_THREADS, else OMP_NUM_THREADS, else cores / ranks on this
// host), then calls body. An exception escaping body is printed with the rank's identity
// and ends the whole job through MPI_Abort, so no rank is left waiting. Returns body's
// exit code.
int run_rank(int argc, char** argv, const std::function<int()>& body);

// run_rank in parts, for a rank whose main loop is not a C++ function (the Python package):
// start_rank initialises MPI, the rank's identity, its intra-op threads and its stop
// handlers (once; later calls do nothing); fail_rank prints `error` with the rank's identity
// and ends the whole job as run_rank does (exit code 2 for an io::InputError, else 1), or
// this process alone where MPI has not started (start_rank failed) or has ended;
// finish_rank finalises MPI (once; nothing if start_rank never ran).
void start_rank();
[[noreturn]] void fail_rank(const std::exception& error);
void finish_rank();

// Intra-op threads for a rank sharing `cores` with `local_ranks` ranks: explicit settings
// first (PIPETRAIN_THREADS, then OMP_NUM_THREADS), else cores / local_ranks, at least 1.
int intra_op_threads(int cores, int local_ranks);

}  // namespace pipetrain::comm
