#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "pipetrain/comm/tensor_transport.h"

namespace pipetrain::comm {
namespace {

TEST(TensorHeader, RoundTripsEverySupportedDtype) {
  std::vector<at::Tensor> tensors;
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble, at::kLong, at::kInt,
                     at::kChar, at::kByte, at::kBool}) {
    tensors.push_back(at::zeros({2, 3}, dtype));
  }
  tensors.push_back(at::zeros({}, at::kFloat).requires_grad_(true));  // a scalar
  tensors.push_back(at::zeros({0, 5}, at::kFloat));                   // an empty tensor
  const auto words = encode_header(tensors);
  const auto metas = decode_header(words.data(), static_cast<int64_t>(words.size()));
  ASSERT_EQ(metas.size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(metas[i].dtype, tensors[i].scalar_type());
    EXPECT_EQ(metas[i].shape, tensors[i].sizes().vec());
    EXPECT_EQ(metas[i].requires_grad, tensors[i].requires_grad());
    EXPECT_TRUE(metas[i].on_host);  // every one is in host memory
  }
}

TEST(TensorHeader, RejectsCorruptHeadersAndUnsupportedDtypes) {
  auto words = encode_header({at::zeros({2}, at::kFloat)});
  words[0] = 7;
  EXPECT_THROW(decode_header(words.data(), static_cast<int64_t>(words.size())), std::runtime_error);
  words = encode_header({at::zeros({2}, at::kFloat)});
  words[2] = 99;  // dtype code
  EXPECT_THROW(decode_header(words.data(), static_cast<int64_t>(words.size())), std::runtime_error);
  words = encode_header({at::zeros({2}, at::kFloat)});
  words[3] = 4;  // flags: only requires-grad (1) and host memory (2)
  EXPECT_THROW(decode_header(words.data(), static_cast<int64_t>(words.size())), std::runtime_error);
  words = encode_header({at::zeros({2, 2}, at::kFloat)});
  EXPECT_THROW(decode_header(words.data(), static_cast<int64_t>(words.size()) - 1),
               std::runtime_error);
  EXPECT_THROW(encode_header({at::zeros({2}, at::kComplexFloat)}), std::invalid_argument);
}

}  // namespace
}  // namespace pipetrain::comm
