#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "pipetrain/checkpoint/safetensors.h"
#include "pipetrain/io/crc32.h"
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
}

TEST(Safetensors, Crc32IsTheIeeeChecksum) {
  EXPECT_EQ(io::crc32("123456789"), 0xCBF43926u);  // the standard check value
}

}  // namespace
}  // namespace pipetrain::checkpoint
