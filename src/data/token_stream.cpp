#include "pipetrain/data/token_stream.h"

#include <ATen/ATen.h>

#include <cstring>

namespace pipetrain::data {

TensorTokens::TensorTokens(at::Tensor ids) : ids_(ids.to(at::kLong).contiguous()) {}

void TensorTokens::read(int64_t start, int64_t count, int64_t /*vocab_size*/, int64_t* out) const {
  std::memcpy(out, ids_.data_ptr<int64_t>() + start,
              static_cast<std::size_t>(count) * sizeof(int64_t));
}

}  // namespace pipetrain::data
