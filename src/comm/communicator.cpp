#include <ATen/ATen.h>

#include <cstring>
#include <stdexcept>

#include "pipetrain/comm/communicator.h"

namespace pipetrain::comm {

bool settled(Work& work) {
  try {
    return work.test();
  } catch (const std::exception&) {
    return false;
  }
}

void check_reducible(const at::Tensor& input, ReduceOp op, int ranks) {
  if (input.dim() != 1 || input.numel() % ranks != 0) {
    throw std::invalid_argument("reduce_scatter needs a 1-D tensor of a multiple of " +
                                std::to_string(ranks) + " elements");
  }
  if (op == ReduceOp::kAverage && !at::isFloatingType(input.scalar_type()))
    throw std::invalid_argument("reduce_scatter average needs a floating-point tensor");
}

std::vector<std::string> all_gather_text(Communicator& comm, const std::string& text) {
  const at::Tensor lengths =
      comm.all_gather(at::tensor({static_cast<int64_t>(text.size())}, at::kLong));
  const int64_t longest = lengths.max().item<int64_t>();
  at::Tensor padded = at::zeros({longest}, at::kByte);
  std::memcpy(padded.data_ptr(), text.data(), text.size());
  const at::Tensor all = comm.all_gather(padded);
  std::vector<std::string> texts;
  for (int r = 0; r < comm.size(); ++r) {
    texts.emplace_back(static_cast<const char*>(all[r].data_ptr()), lengths[r].item<int64_t>());
  }
  return texts;
}

}  // namespace pipetrain::comm
