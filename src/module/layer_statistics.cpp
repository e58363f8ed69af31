#include "module/layer_statistics.h"

#include <ATen/ATen.h>

#include <mutex>

#include "module/activation_checkpoint.h"

namespace pipetrain::module {
namespace {

std::mutex statistics_mutex;
std::map<std::string, at::Tensor> statistics;

}  // namespace

void record_statistic(const std::string& name, const at::Tensor& value) {
  if (recomputing()) return;
  const at::Tensor v = value.detach().to(at::kDouble);
  const std::lock_guard<std::mutex> lock(statistics_mutex);
  at::Tensor& sum = statistics[name];
  if (!sum.defined()) {
    sum = v.clone();
  } else if (sum.sizes() != v.sizes()) {
    throw std::logic_error("statistic " + name + " recorded with two shapes");
  } else {
    sum.add_(v);
  }
}

std::map<std::string, at::Tensor> take_statistics() {
  const std::lock_guard<std::mutex> lock(statistics_mutex);
  return std::exchange(statistics, {});
}

}  // namespace pipetrain::module
