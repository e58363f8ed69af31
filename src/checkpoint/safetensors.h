#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/atomic_file.h"
#include "pipetrain/comm/tensor_list.h"

// The safetensors format: 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the raw little-endian data. Readable from
// Python (`safetensors.torch.load_file`), no code runs on load.
namespace pipetrain::checkpoint {

// Appends the file for `tensors` to `out`: the header, then each tensor's bytes taken from
// the tensor itself; a tensor that is not a contiguous CPU tensor (a transposed view, a GPU
// tensor) goes through in slices of a few MiB, never as a whole copy.
void write_safetensors(io::AtomicFileWriter& out, const comm::NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The whole file in one string.
std::string encode_safetensors(const comm::NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Throws InputError naming `source` and the problem (truncated, bad header, unknown dtype,
// ranges that do not fit).
comm::NamedTensors decode_safetensors(std::string_view bytes, const std::string& source);

// The tensors of a safetensors file without reading it into memory first: each tensor is a
// view of the file's private, copy-on-write mapping (which it keeps alive), or a copy where
// its bytes are not aligned to its element size. The same checks as decode_safetensors.
comm::NamedTensors map_safetensors(const std::filesystem::path& path);

}  // namespace pipetrain::checkpoint
