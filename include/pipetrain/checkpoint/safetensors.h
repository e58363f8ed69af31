#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipetrain/comm/tensor_list.h"

// The safetensors format: 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the raw little-endian data. Readable from
// Python (`safetensors.torch.load_file`), no code runs on load.
namespace pipetrain::checkpoint {

std::string encode_safetensors(const comm::NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Throws InputError naming `source` and the problem (truncated, bad header, unknown dtype,
// ranges that do not fit).
comm::NamedTensors decode_safetensors(std::string_view bytes, const std::string& source);

}  // namespace pipetrain::checkpoint
