#include "pipetrain/mpi_collectives.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

namespace pipetrain::mpi {

MPI_Datatype datatype_of(const at::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    case at::kByte:
      return MPI_UINT8_T;
    case at::kChar:
      return MPI_INT8_T;
    default:
      throw std::invalid_argument(std::string("MPI cannot reduce tensors of dtype ") +
                                  at::toString(tensor.scalar_type()));
  }
}

void all_reduce(at::Tensor& tensor, ReduceOp op, MPI_Comm comm) {
  if (!tensor.device().is_cpu() || !tensor.is_contiguous()) {
    throw std::invalid_argument("mpi::all_reduce needs a contiguous CPU tensor");
  }
  const MPI_Op mpi_op = op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
  const int rc = MPI_Allreduce(MPI_IN_PLACE, tensor.data_ptr(), static_cast<int>(tensor.numel()),
                               datatype_of(tensor), mpi_op, comm);
  if (rc != MPI_SUCCESS) {
    throw std::runtime_error("MPI_Allreduce failed with code " + std::to_string(rc));
  }
}

}  // namespace pipetrain::mpi
