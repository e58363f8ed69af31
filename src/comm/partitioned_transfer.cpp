#include "comm/partitioned_transfer.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "pipetrain/comm/tensor_transport.h"

namespace pipetrain::comm {
namespace {

int64_t share_length(int64_t numel, int size) {
  return (numel + size - 1) / size;
}

// Every rank of the group must have received the same layout, or the all-gathers would
// mix different tensors (or differently sized shares).
void check_group_agrees(const int64_t* words, int64_t count, Communicator& group) {
  // Length, sum and position-weighted sum of the layout's words: a cheap fingerprint.
  int64_t sum = 0, weighted = 0;
  for (int64_t i = 0; i < count; ++i) {
    sum += words[i];
    weighted += (i + 1) * words[i];
  }
  const at::Tensor mine = at::tensor({count, sum, weighted}, at::kLong);
  const at::Tensor all = group.all_gather(mine);
  if (!all.eq(mine).all().item<bool>()) {
    throw std::runtime_error(
        "partitioned transfer: the ranks of the tensor-parallel group received different "
        "tensors (a stage boundary carries a tensor that is not equal across the group; set "
        "pipeline.partitioned_transfers to false for such a model)");
  }
}

}  // namespace

PartitionedTensors partition(const std::vector<at::Tensor>& tensors, int rank, int size) {
  const std::vector<int64_t> words = encode_header(tensors);
  PartitionedTensors out{at::tensor(words, at::kLong), {}};
  for (const auto& tensor : tensors) {
    const at::Tensor flat = tensor.detach().reshape({-1});
    const int64_t share = share_length(flat.numel(), size);
    const int64_t first = std::min(rank * share, flat.numel());
    const int64_t length = std::min(share, flat.numel() - first);
    at::Tensor piece = flat.narrow(0, first, length);
    if (length < share) piece = at::constant_pad_nd(piece, {0, share - length});
    out.shares.push_back(piece.contiguous());
  }
  return out;
}

std::vector<at::Tensor> assemble(const PartitionedTensors& partitioned, Communicator& group,
                                 Communicator& control) {
  const at::Tensor layout = partitioned.layout.cpu().contiguous();
  const std::vector<TensorMeta> metas = decode_header(layout.data_ptr<int64_t>(), layout.numel());
  if (metas.size() != partitioned.shares.size()) {
    throw std::runtime_error("partitioned transfer: the layout describes " +
                             std::to_string(metas.size()) + " tensors, " +
                             std::to_string(partitioned.shares.size()) + " shares arrived");
  }
  check_group_agrees(layout.data_ptr<int64_t>(), layout.numel(), control);
  std::vector<at::Tensor> tensors;
  for (std::size_t i = 0; i < metas.size(); ++i) {
    const TensorMeta& meta = metas[i];
    const at::Tensor& share = partitioned.shares[i];
    const int64_t numel = c10::multiply_integers(meta.shape);
    if (share.scalar_type() != meta.dtype || share.dim() != 1 ||
        share.numel() != share_length(numel, group.size())) {
      throw std::runtime_error("partitioned transfer: share " + std::to_string(i) + " is " +
                               at::toString(share.scalar_type()) + " " + c10::str(share.sizes()) +
                               ", the layout says a share of a " + at::toString(meta.dtype) + " " +
                               c10::str(at::IntArrayRef(meta.shape)));
    }
    at::Tensor tensor = group.all_gather(share.contiguous()).view({-1}).narrow(0, 0, numel);
    tensor = tensor.view(meta.shape).clone();
    if (meta.requires_grad && at::isFloatingType(meta.dtype)) tensor.requires_grad_(true);
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

}  // namespace pipetrain::comm
