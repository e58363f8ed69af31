#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// The safetensors format: 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the raw little-endian data. Readable from
// Python (`safetensors.torch.load_file`), no code runs on load.
namespace pipetrain {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

std::string encode_safetensors(const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Throws InputError naming `source` and the problem (truncated, bad header, unknown dtype,
// ranges that do not fit).
NamedTensors decode_safetensors(std::string_view bytes, const std::string& source);

// The whole file; InputError naming it if it cannot be read.
std::string read_file(const std::filesystem::path& path);

// CRC-32 (IEEE) of the bytes, for checksums in manifests.
uint32_t crc32(std::string_view bytes);

}  // namespace pipetrain
