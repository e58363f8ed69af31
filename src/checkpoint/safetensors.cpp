#include "checkpoint/safetensors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "io/mapped_file.h"
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

// Bytes of a tensor slice written at a time when the tensor must be copied to be written.
constexpr int64_t kSliceBytes = 4 << 20;

// The length word and JSON header: each tensor's dtype, shape and byte range, in order.
std::string header_of(const comm::NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const uint64_t bytes = tensor.numel() * tensor.element_size();
    header[name] = {{"dtype", dtype_name(tensor.scalar_type())},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes
  std::string out(8, '\0');
  const uint64_t length = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return out + json;
}

std::string_view bytes_of(const at::Tensor& contiguous) {
  return {static_cast<const char*>(contiguous.data_ptr()), contiguous.nbytes()};
}

// Where one tensor's bytes lie in the file, checked against the header.
struct TensorEntry {
  std::string name;
  at::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t offset = 0, bytes = 0;  // from the file's first byte
};

std::vector<TensorEntry> read_header(std::string_view file, const std::string& source) {
  auto bad = [&](const std::string& why) { return io::InputError(source + ": " + why); };
  if (file.size() < 8)
    throw bad("truncated (" + std::to_string(file.size()) + " bytes, no header)");
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= static_cast<uint64_t>(static_cast<unsigned char>(file[i])) << (8 * i);
  if (length > file.size() - 8)
    throw bad("truncated (header of " + std::to_string(length) + " bytes does not fit)");
  const nlohmann::json header = nlohmann::json::parse(file.substr(8, length), nullptr, false);
  if (header.is_discarded() || !header.is_object()) throw bad("the header is not a JSON object");
  const std::string_view data = file.substr(8 + length);

  std::vector<TensorEntry> entries;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const auto* dtype = entry.is_object() && entry.contains("dtype") ? &entry["dtype"] : nullptr;
    TensorEntry& tensor = entries.emplace_back(TensorEntry{name, at::kFloat, {}, 0, 0});
    bool known = false;
    for (const auto& [t, n] : kDtypes) {
      if (dtype && dtype->is_string() && *dtype == n) {
        tensor.type = t;
        known = true;
      }
    }
    if (!known) {
      throw bad("tensor '" + name + "' has dtype " +
                (dtype && dtype->is_string() ? dtype->get<std::string>() : std::string("(none)")) +
                ", which pipetrain does not read (it reads F64, F32, F16, BF16, I64, I32, I16, "
                "I8, U8 and BOOL)");
    }
    uint64_t start = 0, end = 0;
    try {
      tensor.shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2) throw std::invalid_argument("offsets");
      start = offsets[0];
      end = offsets[1];
    } catch (const std::exception&) {
      throw bad("tensor '" + name + "' has a malformed shape or data_offsets");
    }
    int64_t numel = 1;
    for (int64_t d : tensor.shape) {
      if (d < 0) throw bad("tensor '" + name + "' has a negative dimension");
      // Past the file's bytes (checked below) once the product exceeds it: stop before the
      // product can overflow.
      if (d != 0 && numel > static_cast<int64_t>(data.size()) / d)
        throw bad("tensor '" + name + "' has a shape larger than the file");
      numel *= d;
    }
    tensor.bytes = numel * c10::elementSize(tensor.type);
    if (end < start || end - start != tensor.bytes)
      throw bad("tensor '" + name + "' has a byte range that does not match its shape");
    if (end > data.size()) {
      throw bad("truncated (tensor '" + name + "' needs bytes up to " + std::to_string(end) +
                ", the file holds " + std::to_string(data.size()) + ")");
    }
    tensor.offset = 8 + length + start;
  }
  // No two tensors may share bytes: each owns its range (empty ones own none).
  std::vector<const TensorEntry*> by_offset;
  for (const auto& entry : entries) {
    if (entry.bytes > 0) by_offset.push_back(&entry);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const TensorEntry& before = *by_offset[i - 1];
    if (before.offset + before.bytes > by_offset[i]->offset)
      throw bad("tensors '" + before.name + "' and '" + by_offset[i]->name +
                "' overlap in the file's bytes");
  }
  return entries;
}

at::Tensor copy_of(const TensorEntry& entry, const char* bytes) {
  at::Tensor tensor = at::empty(entry.shape, at::TensorOptions(entry.type));
  if (entry.bytes) std::memcpy(tensor.data_ptr(), bytes, entry.bytes);
  return tensor;
}

}  // namespace

void write_safetensors(io::AtomicFileWriter& out, const comm::NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  out.append(header_of(tensors, metadata));
  for (const auto& [name, tensor] : tensors) {
    const at::Tensor data = tensor.detach();
    if (data.device().is_cpu() && data.is_contiguous()) {
      out.append(bytes_of(data));
      continue;
    }
    // Whole rows of the first dimension per slice, each made contiguous on the host.
    const int64_t rows = data.dim() == 0 ? 1 : data.size(0);
    const int64_t row_bytes = rows == 0 ? 1 : std::max<int64_t>(data.nbytes() / rows, 1);
    const int64_t step = std::max<int64_t>(kSliceBytes / row_bytes, 1);
    for (int64_t first = 0; first < rows; first += step) {
      const at::Tensor slice =
          data.dim() == 0 ? data : data.narrow(0, first, std::min(step, rows - first));
      out.append(bytes_of(slice.to(at::kCPU).contiguous()));
    }
  }
}

std::string encode_safetensors(const comm::NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::string out = header_of(tensors, metadata);
  for (const auto& [name, tensor] : tensors)
    out += bytes_of(tensor.detach().to(at::kCPU).contiguous());
  return out;
}

comm::NamedTensors decode_safetensors(std::string_view bytes, const std::string& source) {
  comm::NamedTensors tensors;
  for (const TensorEntry& entry : read_header(bytes, source))
    tensors.emplace_back(entry.name, copy_of(entry, bytes.data() + entry.offset));
  return tensors;
}

comm::NamedTensors map_safetensors(const std::filesystem::path& path) {
  auto file = std::make_shared<io::MappedFile>(path, io::MappedFile::Access::kSequential,
                                               io::MappedFile::Pages::kCopyOnWrite);
  comm::NamedTensors tensors;
  for (const TensorEntry& entry : read_header(file->bytes(), path.string())) {
    char* bytes = static_cast<char*>(file->pages()) + entry.offset;
    const bool aligned = reinterpret_cast<uintptr_t>(bytes) % c10::elementSize(entry.type) == 0;
    if (!aligned || entry.bytes == 0) {
      tensors.emplace_back(entry.name, copy_of(entry, bytes));
      continue;
    }
    tensors.emplace_back(entry.name,
                         at::from_blob(
                             bytes, entry.shape, [file](void*) {}, at::TensorOptions(entry.type)));
  }
  return tensors;
}

}  // namespace pipetrain::checkpoint
