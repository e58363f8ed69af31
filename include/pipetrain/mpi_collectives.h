#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

namespace pipetrain::mpi {

enum class ReduceOp { kSum, kMax };

// The MPI datatype of a tensor's elements; throws for types MPI cannot reduce.
MPI_Datatype datatype_of(const at::Tensor& tensor);

// In-place all-reduce of a contiguous CPU tensor over `comm`.
void all_reduce(at::Tensor& tensor, ReduceOp op, MPI_Comm comm);

}  // namespace pipetrain::mpi
