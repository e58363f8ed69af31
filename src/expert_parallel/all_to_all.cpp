#include "pipetrain/expert_parallel/all_to_all.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <atomic>
#include <numeric>
#include <stdexcept>

namespace pipetrain::expert_parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int kRowsTag = 0x4578;    // "Ex"
constexpr int kCountsTag = 0x4563;  // "Ec"

std::atomic<int64_t> rows_bytes_sent{0};

int64_t total(const std::vector<int64_t>& rows) {
  return std::accumulate(rows.begin(), rows.end(), int64_t{0});
}

// The exchange itself, over `communicator` (the group's).
at::Tensor exchange(const at::Tensor& x, const std::vector<int64_t>& send_rows,
                    const std::vector<int64_t>& recv_rows, comm::Communicator& communicator,
                    int tag) {
  const int size = communicator.size();
  if (static_cast<int>(send_rows.size()) != size || static_cast<int>(recv_rows.size()) != size)
    throw std::invalid_argument("all_to_all needs one row count per rank of the group");
  if (total(send_rows) != x.size(0))
    throw std::invalid_argument("all_to_all's row counts do not add up to the rows sent");
  const at::Tensor input = x.contiguous();
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = total(recv_rows);
  at::Tensor output = at::empty(shape, input.options());
  std::vector<at::Tensor> incoming(size), outgoing(size);
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size; ++r) {
    outgoing[r] = input.narrow(0, sent, send_rows[r]);
    incoming[r] = output.narrow(0, received, recv_rows[r]);
    sent += send_rows[r];
    received += recv_rows[r];
  }
  const int me = communicator.rank();
  if (send_rows[me] != recv_rows[me])
    throw std::invalid_argument("all_to_all: a rank's rows to itself must be received as sent");
  for (int r = 0; r < size; ++r) {
    if (tag == kRowsTag && r != me)
      rows_bytes_sent += outgoing[r].numel() * static_cast<int64_t>(outgoing[r].element_size());
  }
  communicator.all_to_all(outgoing, incoming, tag);
  return output;
}

class AllToAll : public torch::autograd::Function<AllToAll> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const std::vector<int64_t>& send_rows,
                            const std::vector<int64_t>& recv_rows,
                            const std::shared_ptr<comm::Communicator>& comm) {
    ctx->saved_data["send"] = send_rows;
    ctx->saved_data["recv"] = recv_rows;
    ctx->saved_data["comm"] =
        c10::IValue::make_capsule(c10::make_intrusive<CommunicatorHolder>(comm));
    return exchange(x, send_rows, recv_rows, *comm, kRowsTag);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto holder =
        c10::static_intrusive_pointer_cast<CommunicatorHolder>(ctx->saved_data["comm"].toCapsule());
    const auto send = ctx->saved_data["send"].toIntVector();
    const auto recv = ctx->saved_data["recv"].toIntVector();
    // The gradients of the rows received go back to their senders.
    return {exchange(grads[0], recv, send, *holder->comm, kRowsTag), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }

 private:
  struct CommunicatorHolder : torch::CustomClassHolder {
    explicit CommunicatorHolder(std::shared_ptr<comm::Communicator> c) : comm(std::move(c)) {}
    std::shared_ptr<comm::Communicator> comm;
  };
};

}  // namespace

at::Tensor all_to_all(const at::Tensor& x, const std::vector<int64_t>& send_rows,
                      const std::vector<int64_t>& recv_rows, const Group& group) {
  if (!group.parallel()) return x;
  return AllToAll::apply(x, send_rows, recv_rows, group.comm);
}

int64_t bytes_sent() {
  return rows_bytes_sent.load();
}

at::Tensor exchange_counts(const at::Tensor& counts, const Group& group) {
  if (!group.parallel()) return counts;
  const std::vector<int64_t> one(group.size(), 1);
  return exchange(counts, one, one, group.control ? *group.control : *group.comm, kCountsTag);
}

}  // namespace pipetrain::expert_parallel
