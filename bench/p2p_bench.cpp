// Point-to-point cost of pipetrain's tensor transport (header + payload) against a raw
// MPI ping-pong of the same bytes, measured side by side in one run of two ranks:
//   pipetrain launch -n 2 -- build/bench/p2p_bench
#include <ATen/ATen.h>
#include <mpi.h>

#include <thread>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/comm/tensor_transport.h"

namespace {

using pipetrain::comm::MpiCommunicator;
using pipetrain::comm::TensorTransport;
using Clock = std::chrono::steady_clock;

constexpr int kTag = 7;
constexpr int kRounds = 5;

// Seconds per one-way transfer: half the best round trip over `rounds` batches.
template <typename PingPong>
double one_way_seconds(int iterations, PingPong&& ping_pong) {
  double best = 1e30;
  for (int round = 0; round < kRounds; ++round) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) ping_pong();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::min(best, seconds / iterations / 2);
  }
  return best;
}

// Rank 0 sends, rank 1 answers with the same bytes.
void raw_round_trip(int me, int peer, void* data, int bytes) {
  if (me == 0) {
    MPI_Send(data, bytes, MPI_BYTE, peer, kTag, MPI_COMM_WORLD);
    MPI_Recv(data, bytes, MPI_BYTE, peer, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(data, bytes, MPI_BYTE, peer, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(data, bytes, MPI_BYTE, peer, kTag, MPI_COMM_WORLD);
  }
}

// The same through the transport, receiving into the previous buffers.
void tensor_round_trip(TensorTransport& transport, int me, int peer,
                       std::vector<at::Tensor>& buffers) {
  if (me == 0) {
    transport.send(buffers, peer, kTag).wait();
    buffers = transport.recv(peer, kTag, buffers);
  } else {
    buffers = transport.recv(peer, kTag, buffers);
    transport.send(buffers, peer, kTag).wait();
  }
}

// A 16 MiB transfer whose other end comes 200 ms late: the early side has waited past its
// spin phase by then. Seconds from the late side's arrival until the transfer is done there.
double late_peer_seconds(TensorTransport& transport, int me, bool late_receiver) {
  const int peer = 1 - me;
  std::vector<at::Tensor> payload = {at::ones({4 << 20}, at::kFloat)};
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    MPI_Barrier(MPI_COMM_WORLD);
    const bool late = (me == 1) == late_receiver;
    if (late) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto start = Clock::now();
    if (me == 0) {
      transport.send(payload, peer, kTag).wait();
    } else {
      payload = transport.recv(peer, kTag, payload);
    }
    double seconds = late ? std::chrono::duration<double>(Clock::now() - start).count() : 0;
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    best = std::min(best, seconds);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  return pipetrain::run_rank(argc, argv, [] {
    auto world = MpiCommunicator::world();
    if (world->size() != 2) {
      std::fprintf(stderr, "p2p_bench needs exactly 2 ranks\n");
      return 2;
    }
    const int me = world->rank();
    const int peer = 1 - me;
    TensorTransport transport(world, world);

    if (me == 0) {
      std::printf("%10s %12s %12s %12s %12s %8s\n", "bytes", "raw us", "tensor us", "raw GB/s",
                  "tensor GB/s", "ratio");
    }
    for (int64_t bytes = 4 << 10; bytes <= 64 << 20; bytes *= 4) {
      const int iterations = static_cast<int>(std::clamp<int64_t>((256 << 20) / bytes, 10, 2000));
      at::Tensor payload = at::ones({bytes / 4}, at::kFloat);
      std::vector<char> raw(bytes);

      const double raw_seconds = one_way_seconds(
          iterations, [&] { raw_round_trip(me, peer, raw.data(), static_cast<int>(bytes)); });
      std::vector<at::Tensor> buffers = {payload};
      const double tensor_seconds =
          one_way_seconds(iterations, [&] { tensor_round_trip(transport, me, peer, buffers); });
      if (me == 0) {
        std::printf("%10lld %12.2f %12.2f %12.2f %12.2f %8.3f\n", static_cast<long long>(bytes),
                    raw_seconds * 1e6, tensor_seconds * 1e6, bytes / raw_seconds / 1e9,
                    bytes / tensor_seconds / 1e9, tensor_seconds / raw_seconds);
      }
    }

    // The header's share: a one-element tensor against a raw 4-byte message.
    std::vector<at::Tensor> tiny = {at::ones({1})};
    char word[4] = {};
    const double raw_tiny = one_way_seconds(2000, [&] { raw_round_trip(me, peer, word, 4); });
    const double tensor_tiny =
        one_way_seconds(2000, [&] { tensor_round_trip(transport, me, peer, tiny); });
    const std::vector<at::Tensor> tuple = {at::ones({8, 128, 512}), at::ones({8, 128}, at::kLong),
                                           at::ones({8, 128}, at::kBool)};
    double encode_decode = 1e30;
    for (int round = 0; round < kRounds; ++round) {
      const auto start = Clock::now();
      for (int i = 0; i < 10000; ++i) {
        const auto words = pipetrain::comm::encode_header(tuple);
        pipetrain::comm::decode_header(words.data(), static_cast<int64_t>(words.size()));
      }
      encode_decode = std::min(encode_decode,
                               std::chrono::duration<double>(Clock::now() - start).count() / 10000);
    }
    if (me == 0) {
      std::printf(
          "\nheader cost per transfer: %.2f us (1-element tensor %.2f us vs raw 4 bytes %.2f us)\n",
          (tensor_tiny - raw_tiny) * 1e6, tensor_tiny * 1e6, raw_tiny * 1e6);
      std::printf("header encode + decode of a 3-tensor tuple: %.3f us\n", encode_decode * 1e6);
    }
    const double late_receiver = late_peer_seconds(transport, me, true);
    const double late_sender = late_peer_seconds(transport, me, false);
    if (me == 0) {
      std::printf(
          "16 MiB with the other end 200 ms late: %.1f ms after a late receiver comes, %.1f ms "
          "after a late sender comes\n",
          late_receiver * 1e3, late_sender * 1e3);
    }
    return 0;
  });
}
