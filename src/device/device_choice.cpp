#include "pipetrain/device/device_choice.h"

#include <cstdlib>
#include <string>

#include "pipetrain/io/errors.h"

namespace pipetrain::device {

int choose_gpu(DeviceKind kind, int local_rank, int visible_gpus, bool cuda_built) {
  if (kind == DeviceKind::kCpu) return -1;
  if (visible_gpus > 0 && cuda_built) return local_rank % visible_gpus;
  if (kind == DeviceKind::kAuto) return -1;
  if (!cuda_built) {
    throw io::InputError(
        "device \"cuda\": this pipetrain was built without CUDA (rebuild with a CUDA toolkit "
        "and PIPETRAIN_CUDA=ON)");
  }
  throw io::InputError(
      "device \"cuda\": no GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
}

int local_rank_from_environment(int fallback) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    const char* value = std::getenv(name);
    if (!value || !*value) continue;
    char* end = nullptr;
    const long rank = std::strtol(value, &end, 10);
    if (*end == '\0' && rank >= 0) return static_cast<int>(rank);
  }
  return fallback;
}

}  // namespace pipetrain::device
