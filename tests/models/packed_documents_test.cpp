// Packed documents: positions restart at each document, the mask keeps attention inside a
// document, and so a token's logits depend on its own document alone (GPT and LLaMA):
// changing another document of the window changes nothing, and each packed document's
// logits are those of the document run alone.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "data/token_data.h"
#include "models/packed_documents.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/module/pipeline_module.h"

namespace pipetrain::models {
namespace {

TEST(PackedDocuments, DocumentsPositionsAndMask) {
  // The id 9 ends a document; the token after it starts the next.
  const at::Tensor ids = at::tensor({4, 9, 3, 3, 9, 9, 1, 2}, at::kLong).view({1, 8});
  const at::Tensor documents = data::documents_of(ids, 9);
  EXPECT_TRUE(at::equal(documents, at::tensor({0, 0, 1, 1, 1, 2, 3, 3}, at::kLong).view({1, 8})));
  EXPECT_TRUE(at::equal(document_positions(documents),
                        at::tensor({0, 1, 0, 1, 2, 0, 0, 1}, at::kLong).view({1, 8})));
  const at::Tensor mask = document_mask(documents)[0][0];
  EXPECT_TRUE(mask[3][2].item<bool>());   // same document, earlier
  EXPECT_FALSE(mask[2][3].item<bool>());  // later
  EXPECT_FALSE(mask[2][1].item<bool>());  // the previous document
  EXPECT_EQ(mask.sum().item<int64_t>(), 3 + 6 + 1 + 3);
}

ModelConfig tiny(const models::FamilyRow* type) {
  ModelConfig config;
  config.type = type;
  config.gpt = {.vocab_size = 20, .context = 12, .d_model = 8, .heads = 2, .layers = 2};
  config.llama = {.vocab_size = 20,
                  .context = 12,
                  .d_model = 8,
                  .heads = 4,
                  .num_key_value_heads = 2,
                  .intermediate_size = 12,
                  .layers = 2};
  return config;
}

at::Tensor logits(module::PipelineModule& model, const module::Activation& inputs) {
  const at::NoGradGuard no_grad;
  return model.forward(inputs).at(0);
}

TEST(PackedDocuments, ATokensLogitsDependOnItsOwnDocumentAlone) {
  for (const models::FamilyRow* type : {models::family("gpt"), models::family("llama")}) {
    SCOPED_TRACE(type->name);
    const BuiltinModel built = make_builtin_model(tiny(type));
    module::PipelineModule model(built.layers, built.loss, {.seed = 3});
    model.train(false);
    // Three documents: positions 0-3, 4-8, 9-11.
    const at::Tensor documents =
        at::tensor({0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2}, at::kLong).view({1, 12});
    at::manual_seed(8);
    const at::Tensor ids = at::randint(20, {1, 12}, at::kLong);
    const at::Tensor packed = logits(model, {ids, documents});

    at::Tensor changed = ids.clone();
    changed.narrow(1, 4, 5).copy_(at::randint(20, {1, 5}, at::kLong));
    const at::Tensor after = logits(model, {changed, documents});
    for (const auto& [first, length] : {std::pair{0, 4}, std::pair{9, 3}}) {
      EXPECT_TRUE(
          at::allclose(after.narrow(1, first, length), packed.narrow(1, first, length), 1e-6, 1e-6))
          << "document at " << first << " changed with its neighbour";
    }
    EXPECT_FALSE(at::allclose(after.narrow(1, 4, 5), packed.narrow(1, 4, 5)));

    // Each document alone, unpacked from position 0, gives its packed logits.
    for (const auto& [first, length] : {std::pair{0, 4}, std::pair{4, 5}, std::pair{9, 3}}) {
      const at::Tensor alone = logits(model, {ids.narrow(1, first, length).contiguous()});
      EXPECT_TRUE(at::allclose(alone, packed.narrow(1, first, length), 1e-5, 1e-6))
          << "document at " << first << " differs from itself alone by "
          << (alone - packed.narrow(1, first, length)).abs().max().item<double>();
    }
    // Unpacked, the window is one sequence: the last document sees the others.
    const at::Tensor whole = logits(model, {ids});
    EXPECT_FALSE(at::allclose(whole.narrow(1, 9, 3), packed.narrow(1, 9, 3)));
  }
}

}  // namespace
}  // namespace pipetrain::models
