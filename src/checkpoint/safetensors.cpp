#include "pipetrain/checkpoint/safetensors.h"

#include <ATen/ATen.h>

#include <array>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pipetrain/io/errors.h"

namespace pipetrain::checkpoint {
namespace {

constexpr std::array<std::pair<at::ScalarType, const char*>, 10> kDtypes = {{
    {at::kFloat, "F32"},
    {at::kHalf, "F16"},
    {at::kBFloat16, "BF16"},
    {at::kDouble, "F64"},
    {at::kLong, "I64"},
    {at::kInt, "I32"},
    {at::kShort, "I16"},
    {at::kChar, "I8"},
    {at::kByte, "U8"},
    {at::kBool, "BOOL"},
}};

const char* dtype_name(at::ScalarType type) {
  for (const auto& [t, name] : kDtypes) {
    if (t == type) return name;
  }
  throw std::invalid_argument(std::string("safetensors cannot store dtype ") + at::toString(type));
}

}  // namespace

std::string encode_safetensors(const comm::NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> payloads;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    at::Tensor data = tensor.detach().to(at::kCPU).contiguous();
    const uint64_t bytes = data.numel() * data.element_size();
    header[name] = {{"dtype", dtype_name(data.scalar_type())},
                    {"shape", data.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    payloads.push_back(std::move(data));
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes
  std::string out(8, '\0');
  const uint64_t length = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  out += json;
  out.reserve(out.size() + offset);
  for (const auto& data : payloads) {
    out.append(static_cast<const char*>(data.data_ptr()), data.numel() * data.element_size());
  }
  return out;
}

comm::NamedTensors decode_safetensors(std::string_view bytes, const std::string& source) {
  auto bad = [&](const std::string& why) { return io::InputError(source + ": " + why); };
  if (bytes.size() < 8)
    throw bad("truncated (" + std::to_string(bytes.size()) + " bytes, no header)");
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (length > bytes.size() - 8)
    throw bad("truncated (header of " + std::to_string(length) + " bytes does not fit)");
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, length), nullptr, false);
  if (header.is_discarded() || !header.is_object()) throw bad("the header is not a JSON object");
  const std::string_view data = bytes.substr(8 + length);

  comm::NamedTensors tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const auto* dtype = entry.is_object() && entry.contains("dtype") ? &entry["dtype"] : nullptr;
    at::ScalarType type = at::kFloat;
    bool known = false;
    for (const auto& [t, n] : kDtypes) {
      if (dtype && dtype->is_string() && *dtype == n) {
        type = t;
        known = true;
      }
    }
    if (!known) throw bad("tensor '" + name + "' has an unknown dtype");
    std::vector<int64_t> shape;
    uint64_t start = 0, end = 0;
    try {
      shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2) throw std::invalid_argument("offsets");
      start = offsets[0];
      end = offsets[1];
    } catch (const std::exception&) {
      throw bad("tensor '" + name + "' has a malformed shape or data_offsets");
    }
    int64_t numel = 1;
    for (int64_t d : shape) {
      if (d < 0) throw bad("tensor '" + name + "' has a negative dimension");
      numel *= d;
    }
    const uint64_t expected = numel * c10::elementSize(type);
    if (end < start || end - start != expected)
      throw bad("tensor '" + name + "' has a byte range that does not match its shape");
    if (end > data.size()) {
      throw bad("truncated (tensor '" + name + "' needs bytes up to " + std::to_string(end) +
                ", the file holds " + std::to_string(data.size()) + ")");
    }
    at::Tensor tensor = at::empty(shape, at::TensorOptions(type));
    if (expected) std::memcpy(tensor.data_ptr(), data.data() + start, expected);
    tensors.emplace_back(name, std::move(tensor));
  }
  return tensors;
}

}  // namespace pipetrain::checkpoint
