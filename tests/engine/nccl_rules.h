// NCCL's point-to-point rules held on the CPU: a link whose payloads are matched by order
// alone (one tag) and whose sends complete only once received (MPI_Issend), for the tests
// that carry the pipe's lanes over it (nccl_rules_test.cpp, kv_cache_test.cpp).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <ATen/ATen.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "../comm/forwarding_communicator.h"
#include "pipetrain/comm/deadline.h"
#include "pipetrain/comm/mpi_communicator.h"

namespace pipetrain::testing {

// A completed-when-MPI-says-so request, with a deadline and a size check for receives.
class RequestWork final : public comm::Work {
 public:
  RequestWork(std::string what, at::Tensor keep_alive, int64_t expected_bytes, bool receives,
              comm::Seconds timeout)
      : what_(std::move(what)),
        keep_alive_(std::move(keep_alive)),
        expected_(expected_bytes),
        receives_(receives),
        timeout_(timeout) {}
  MPI_Request* request() { return &request_; }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    MPI_Status status;
    const int code = MPI_Test(&request_, &flag, &status);
    if (code != MPI_SUCCESS) throw std::runtime_error(what_ + ": size mismatch (truncated)");
    if (!flag) return false;
    done_ = true;
    if (receives_) {
      int bytes = 0;
      MPI_Get_count(&status, MPI_BYTE, &bytes);
      if (bytes != expected_) {
        throw std::runtime_error(what_ + ": size mismatch, expected " + std::to_string(expected_) +
                                 " bytes, got " + std::to_string(bytes));
      }
    }
    return true;
  }
  void wait() override {
    comm::wait_with_deadline([this] { return test(); }, [this] { return what_; }, timeout_);
  }

 private:
  std::string what_;
  at::Tensor keep_alive_;
  int64_t expected_;
  bool receives_;
  comm::Seconds timeout_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

// A pair link whose payloads are matched by order alone (one tag) and whose sends complete
// only once received (MPI_Issend): NCCL's point-to-point rules on MPI.
class Rendezvous final : public ForwardingCommunicator {
 public:
  explicit Rendezvous(std::shared_ptr<comm::Communicator> pair)
      : ForwardingCommunicator(pair), mpi_(dynamic_cast<comm::MpiCommunicator&>(*pair).handle()) {}

  comm::WorkPtr send(const at::Tensor& tensor, int peer, int) override {
    const at::Tensor data = tensor.contiguous();
    auto work = std::make_unique<RequestWork>("order-matched send to " + std::to_string(peer), data,
                                              bytes(data), false, timeout());
    MPI_Issend(data.data_ptr(), static_cast<int>(bytes(data)), MPI_BYTE, peer, 0, mpi_,
               work->request());
    ++sends;
    return work;
  }
  comm::WorkPtr recv(at::Tensor& tensor, int peer, int) override {
    EXPECT_TRUE(tensor.is_contiguous());
    auto work = std::make_unique<RequestWork>("order-matched recv from " + std::to_string(peer),
                                              tensor, bytes(tensor), true, timeout());
    // A longer message fails MPI_Test (truncated), a shorter one the count check.
    MPI_Irecv(tensor.data_ptr(), static_cast<int>(bytes(tensor)), MPI_BYTE, peer, 0, mpi_,
              work->request());
    ++receives;
    return work;
  }

  std::atomic<int> sends{0}, receives{0};

 private:
  static int64_t bytes(const at::Tensor& t) { return t.numel() * t.element_size(); }
  MPI_Comm mpi_;
};

}  // namespace pipetrain::testing
