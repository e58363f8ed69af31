#include "pipetrain/comm/partitioned_transfer.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace pipetrain::comm {

PartitionedTensors partition(const std::vector<at::Tensor>& tensors, int rank, int size) {
  std::vector<int64_t> layout{static_cast<int64_t>(tensors.size())};
  PartitionedTensors out;
  for (const auto& tensor : tensors) {
    layout.push_back(tensor.requires_grad() ? 1 : 0);
    layout.push_back(tensor.dim());
    layout.insert(layout.end(), tensor.sizes().begin(), tensor.sizes().end());
    const int64_t share = (tensor.numel() + size - 1) / size;
    const at::Tensor flat = tensor.detach().reshape({-1});
    const int64_t first = std::min(rank * share, flat.numel());
    const int64_t length = std::min(share, flat.numel() - first);
    at::Tensor piece = flat.narrow(0, first, length);
    if (length < share) piece = at::constant_pad_nd(piece, {0, share - length});
    out.shares.push_back(piece.contiguous());
  }
  out.layout = at::tensor(layout, at::kLong);
  return out;
}

std::vector<at::Tensor> assemble(const PartitionedTensors& partitioned, Communicator& group) {
  const at::Tensor layout = partitioned.layout.contiguous();
  const int64_t* words = layout.data_ptr<int64_t>();
  const int64_t size = layout.numel();
  if (size < 1 || words[0] != static_cast<int64_t>(partitioned.shares.size())) {
    throw std::runtime_error("partitioned transfer: the layout describes " +
                             std::to_string(size < 1 ? -1 : words[0]) + " tensors, " +
                             std::to_string(partitioned.shares.size()) + " shares arrived");
  }
  std::vector<at::Tensor> tensors;
  int64_t at = 1;
  for (const auto& share : partitioned.shares) {
    if (at + 2 > size || at + 2 + words[at + 1] > size)
      throw std::runtime_error("partitioned transfer: truncated layout");
    const bool requires_grad = words[at] != 0;
    const std::vector<int64_t> shape(words + at + 2, words + at + 2 + words[at + 1]);
    at += 2 + words[at + 1];
    const at::Tensor whole = group.all_gather(share.contiguous()).reshape({-1});
    at::Tensor tensor = whole.narrow(0, 0, c10::multiply_integers(shape)).view(shape).clone();
    if (requires_grad && at::isFloatingType(tensor.scalar_type())) tensor.requires_grad_(true);
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

}  // namespace pipetrain::comm
