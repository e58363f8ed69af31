#pragma once

#include <string>
#include <utility>
#include <vector>

// For testing only: NCCL on one GPU. NCCL refuses two ranks on one GPU only when it takes
// them for ranks of one host (same host hash and bus id), and its host hash honours
// NCCL_HOSTID. With PIPETRAIN_EMULATED_HOSTS=1 each rank on a GPU poses as a host of its
// own: it sets its own NCCL_HOSTID and turns off NCCL's same-host paths (peer-to-peer,
// shared memory, NVLink SHARP, InfiniBand) so that ranks sharing a GPU talk over loopback
// sockets. Kernels, streams, events, the allocator and NCCL's ordering rules are the real
// ones; only the wire is slower. Every transport choice then sees GPUs of their own, and
// the job line says "nccl (emulated hosts)".
namespace pipetrain::device {

// PIPETRAIN_EMULATED_HOSTS: unset, empty or "0": off; "1": on. Throws InputError otherwise.
bool emulated_hosts();

// What a rank sets, before its first NCCL call, to pose as host `global_rank`.
std::vector<std::pair<std::string, std::string>> emulated_host_environment(int global_rank);

// Sets emulated_host_environment(global_rank) in this process (overwriting).
void enter_emulated_host(int global_rank);

// The host part of a GPU's identity: NCCL_HOSTID where set (as NCCL hashes it), else the
// host name.
std::string host_identity();

}  // namespace pipetrain::device
