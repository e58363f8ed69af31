// Point-to-point cost of pipetrain's tensor transport (header + payload) against a raw
// MPI ping-pong of the same bytes, measured side by side in one run of two ranks:
//   pipetrain launch -n 2 -- build/bench/p2p_bench
#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>
#include <vector>

#include "pipetrain/comm/deadline.h"
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

// A 16 MiB transfer whose other end comes 200 ms late, so the early end has waited past its
// spin phase and polls with pauses of up to `pause`. Returns the milliseconds from the late
// end's arrival until the transfer is done there, and the early end's CPU milliseconds per
// second of waiting.
struct LatePeer {
  double transfer_ms;
  double cpu_ms_per_s;
};

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

LatePeer late_peer(TensorTransport& transport, int me, bool late_receiver,
                   std::chrono::microseconds pause) {
  pipetrain::comm::set_longest_poll_sleep(pause);
  const int peer = 1 - me;
  std::vector<at::Tensor> payload = {at::ones({4 << 20}, at::kFloat)};
  MPI_Barrier(MPI_COMM_WORLD);
  const bool late = (me == 1) == late_receiver;
  if (late) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = Clock::now();
  const double cpu_start = thread_cpu_seconds();
  if (me == 0) {
    transport.send(payload, peer, kTag).wait();
  } else {
    payload = transport.recv(peer, kTag, payload);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  double result[2] = {late ? seconds * 1e3 : 0,
                      late ? 0 : (thread_cpu_seconds() - cpu_start) * 1e3 / seconds};
  MPI_Allreduce(MPI_IN_PLACE, result, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return {result[0], result[1]};
}

// The poll-pause study: each pause in turn, rounds interleaved, medians.
void poll_pause_study(TensorTransport& transport, int me) {
  const std::vector<int> pauses_us = {1000, 300, 100, 30};
  constexpr int kStudyRounds = 5;
  std::vector<std::vector<LatePeer>> receiver(pauses_us.size()), sender(pauses_us.size());
  for (int round = 0; round < kStudyRounds; ++round) {
    for (std::size_t p = 0; p < pauses_us.size(); ++p) {
      const auto pause = std::chrono::microseconds(pauses_us[p]);
      receiver[p].push_back(late_peer(transport, me, true, pause));
      sender[p].push_back(late_peer(transport, me, false, pause));
    }
  }
  pipetrain::comm::set_longest_poll_sleep(std::chrono::microseconds(100));
  if (me != 0) return;
  auto median = [](std::vector<LatePeer> v, double LatePeer::*field) {
    std::sort(v.begin(), v.end(),
              [field](const auto& a, const auto& b) { return a.*field < b.*field; });
    return v[v.size() / 2].*field;
  };
  std::printf("\n16 MiB with the other end 200 ms late (medians of %d interleaved rounds):\n",
              kStudyRounds);
  std::printf("%12s %18s %18s %22s\n", "poll pause", "late receiver ms", "late sender ms",
              "waiting CPU ms per s");
  for (std::size_t p = 0; p < pauses_us.size(); ++p) {
    std::vector<LatePeer> both = receiver[p];
    both.insert(both.end(), sender[p].begin(), sender[p].end());
    std::printf("%9d us %18.1f %18.1f %22.1f\n", pauses_us[p],
                median(receiver[p], &LatePeer::transfer_ms),
                median(sender[p], &LatePeer::transfer_ms), median(both, &LatePeer::cpu_ms_per_s));
  }
}

}  // namespace

int main(int argc, char** argv) {
  return pipetrain::comm::run_rank(argc, argv, [] {
    auto world = MpiCommunicator::world();
    if (world->size() != 2) {
      std::fprintf(stderr, "p2p_bench needs exactly 2 ranks\n");
      return 2;
    }
    const int me = world->rank();
    const int peer = 1 - me;
    TensorTransport transport(world);

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
    poll_pause_study(transport, me);
    return 0;
  });
}
