#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <unistd.h>

#include <filesystem>

#include "checkpoint/safetensors.h"
#include "io/crc32.h"
#include "io/read_file.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::checkpoint {
namespace {

TEST(Safetensors, RoundTripsEveryDtypeAndShape) {
  comm::NamedTensors tensors;
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble, at::kLong, at::kInt,
                     at::kShort, at::kChar, at::kByte}) {
    tensors.emplace_back(std::string("t_") + at::toString(dtype),
                         (at::arange(6) * 3).reshape({2, 3}).to(dtype));
  }
  tensors.emplace_back("flags", at::tensor({1, 0, 1}).to(at::kBool));
  tensors.emplace_back("scalar", at::tensor(2.5));
  tensors.emplace_back("empty", at::zeros({0, 4}));
  tensors.emplace_back("strided", at::arange(12.0).reshape({3, 4}).t());  // not contiguous
  const std::string bytes = encode_safetensors(tensors, {{"format", "pt"}});
  uint64_t header = 0;
  for (int i = 0; i < 8; ++i)
    header |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(header % 8, 0u);  // padded, so the data starts 8-byte aligned
  const comm::NamedTensors back = decode_safetensors(bytes, "memory");
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    const auto found =
        std::find_if(back.begin(), back.end(), [&](const auto& e) { return e.first == name; });
    ASSERT_NE(found, back.end()) << name;
    EXPECT_EQ(found->second.scalar_type(), tensor.scalar_type()) << name;
    EXPECT_TRUE(at::equal(found->second, tensor)) << name;
  }
}

// A temporary folder removed at the end of the test.
struct TemporaryFolder {
  TemporaryFolder()
      : path(std::filesystem::temp_directory_path() /
             ("safetensors_test_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~TemporaryFolder() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
};

TEST(Safetensors, WrittenFilesEqualTheEncodingAndMapBack) {
  const TemporaryFolder folder;
  comm::NamedTensors tensors{
      {"transposed", at::arange(1.1e6).reshape({1100, 1000}).t()},  // 4.4 MB: two slices
      {"half", at::arange(7).to(at::kHalf)},  // 14 bytes: the next tensor is misaligned
      {"after", at::arange(5.0)},
      {"scalar", at::tensor(2.5)},
      {"empty", at::zeros({0, 3})}};
  const std::filesystem::path path = folder.path / "t.safetensors";
  io::AtomicFileWriter file(path, 4096);  // a small buffer: pieces cross its end
  write_safetensors(file, tensors, {{"format", "pt"}});
  file.commit();
  const std::string expected = encode_safetensors(tensors, {{"format", "pt"}});
  const std::string written = io::read_file(path);
  EXPECT_EQ(written, expected);
  EXPECT_EQ(file.size(), expected.size());
  EXPECT_EQ(file.crc32(), io::crc32(expected));

  const comm::NamedTensors mapped = map_safetensors(path);  // in the header's (sorted) order
  ASSERT_EQ(mapped.size(), tensors.size());
  auto named = [&](const std::string& name) {
    for (const auto& [n, t] : mapped) {
      if (n == name) return t;
    }
    return at::Tensor();
  };
  for (const auto& [name, tensor] : tensors) {
    ASSERT_TRUE(named(name).defined()) << name;
    EXPECT_TRUE(at::equal(named(name), tensor)) << name;
  }
  named("transposed").add_(1);  // copy on write: the file keeps its bytes
  EXPECT_EQ(io::read_file(path), expected);
}

TEST(Safetensors, AnUncommittedWriteLeavesNothing) {
  const TemporaryFolder folder;
  {
    io::AtomicFileWriter file(folder.path / "t.safetensors");
    write_safetensors(file, {{"w", at::ones({4, 4})}});
  }
  EXPECT_TRUE(std::filesystem::is_empty(folder.path));
}

TEST(Safetensors, MappedFilesAreCheckedLikeBytes) {
  const TemporaryFolder folder;
  const std::string good = encode_safetensors({{"w", at::ones({4, 4})}});
  const std::filesystem::path path = folder.path / "short.safetensors";
  io::write_file_atomically(path, good.substr(0, good.size() - 10));
  try {
    map_safetensors(path);
    FAIL() << "a truncated file was mapped";
  } catch (const io::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("short.safetensors: truncated"), std::string::npos)
        << e.what();
  }
}

TEST(Safetensors, DamagedBytesAreInputErrorsNamingTheSource) {
  const std::string good = encode_safetensors({{"w", at::ones({4, 4})}});
  auto error = [](const std::string& bytes) {
    try {
      decode_safetensors(bytes, "f.safetensors");
    } catch (const io::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("abc"), "f.safetensors: truncated (3 bytes, no header)");
  EXPECT_NE(error(good.substr(0, good.size() - 10))
                .find("f.safetensors: truncated (tensor 'w' needs bytes up to 64"),
            std::string::npos);
  std::string bad_json = good;
  bad_json[8] = '[';
  EXPECT_EQ(error(bad_json), "f.safetensors: the header is not a JSON object");
  std::string huge = good;
  huge[7] = 0x7f;
  EXPECT_NE(error(huge).find("does not fit"), std::string::npos);
  // Two tensors claiming the same bytes (each range matching its shape) are refused.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  std::string overlapping(8, '\0');
  for (int i = 0; i < 8; ++i) overlapping[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  overlapping += header + std::string(12, '\0');
  EXPECT_EQ(error(overlapping), "f.safetensors: tensors 'a' and 'b' overlap in the file's bytes");
}

TEST(Safetensors, Crc32IsTheIeeeChecksum) {
  EXPECT_EQ(io::crc32("123456789"), 0xCBF43926u);  // the standard check value
}

}  // namespace
}  // namespace pipetrain::checkpoint
