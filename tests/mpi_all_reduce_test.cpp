// Run under mpirun: every rank builds a LibTorch tensor from its rank, all-reduces it
// over MPI and checks the sum. Exit code 1 on any rank fails the ctest case.
#include <ATen/ATen.h>

#include <cstdio>

#include "pipetrain/mpi_collectives.h"
#include "pipetrain/mpi_world.h"

int main(int argc, char** argv) {
  pipetrain::MpiWorld world(&argc, &argv);
  const int n = world.size();

  // Rank r contributes (r + 1) * [0, 1, ..., 11]; the sum is n(n+1)/2 * [0..11].
  at::Tensor values = at::arange(12, at::kFloat).reshape({3, 4}) * (world.rank() + 1);
  pipetrain::mpi::all_reduce(values, pipetrain::mpi::ReduceOp::kSum, world.comm());
  const at::Tensor expected = at::arange(12, at::kFloat).reshape({3, 4}) * (n * (n + 1) / 2);

  at::Tensor largest = at::full({1}, world.rank(), at::kLong);
  pipetrain::mpi::all_reduce(largest, pipetrain::mpi::ReduceOp::kMax, world.comm());

  const bool ok = n == 4 && at::equal(values, expected) && largest.item<int64_t>() == n - 1;
  std::printf("rank %d/%d: all-reduce %s\n", world.rank(), n, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
