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

void Communicator::all_to_all(const std::vector<at::Tensor>& outgoing,
                              std::vector<at::Tensor>& incoming, int tag) {
  if (static_cast<int>(outgoing.size()) != size() || static_cast<int>(incoming.size()) != size())
    throw std::invalid_argument("all_to_all needs one tensor to and from each rank");
  std::vector<WorkPtr> works;
  for (int r = 0; r < size(); ++r) {
    if (r != rank() && incoming[r].numel() > 0) works.push_back(recv(incoming[r], r, tag));
  }
  for (int r = 0; r < size(); ++r) {
    if (r != rank() && outgoing[r].numel() > 0) works.push_back(send(outgoing[r], r, tag));
  }
  incoming[rank()].copy_(outgoing[rank()]);
  for (const auto& work : works) work->wait();
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
