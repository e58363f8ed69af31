// Tokenizer pieces without the tokenizers library: UTF-8, GPT-2's byte alphabet, BPE merges
// and tokenizer.json errors (tests/data/tokenizer_parity.py compares with the library).
#include <gtest/gtest.h>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/bpe_model.h"
#include "data/byte_level.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::data {
namespace {

using nlohmann::json;

TEST(Utf8, StepsOverWholeCharactersAndReplacesBrokenOnes) {
  const std::string text = "a\xC3\xA9\xE6\x9D\xB1\xF0\x9F\x98\x80";  // a é 東 😀
  EXPECT_EQ(next_character(text, 0), 1u);
  EXPECT_EQ(next_character(text, 1), 3u);
  EXPECT_EQ(next_character(text, 3), 6u);
  EXPECT_EQ(next_character(text, 6), 10u);
  EXPECT_TRUE(is_utf8(text));
  EXPECT_FALSE(is_utf8("\xE6\x9D"));
  EXPECT_FALSE(is_utf8("\x80"));
  // A cut-off character is one U+FFFD; a stray continuation byte is one more.
  EXPECT_EQ(lossy_utf8("x\xE6\x9Dy\x80z"), "x\xEF\xBF\xBDy\xEF\xBF\xBDz");
  EXPECT_EQ(lossy_utf8(text), text);
  // Overlong forms and surrogates are not UTF-8: each byte of them is replaced.
  EXPECT_FALSE(is_utf8("\xC0\x80"));
  EXPECT_FALSE(is_utf8("\xED\xA0\x80"));
  EXPECT_EQ(lossy_utf8("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(ByteLevel, EveryByteHasAPrintableCharacterAndComesBack) {
  EXPECT_EQ(bytes_to_unicode(" "), "\xC4\xA0");   // U+0120, GPT-2's Ġ
  EXPECT_EQ(bytes_to_unicode("\n"), "\xC4\x8A");  // Ċ
  EXPECT_EQ(bytes_to_unicode("Az!~"), "Az!~");
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(unicode_to_bytes(bytes_to_unicode(all)), all);
  EXPECT_EQ(unicode_to_bytes("<|end|>\xE6\x9D\xB1"), "<|end|>\xE6\x9D\xB1");  // kept as is
}

json model(json vocab, json merges) {
  return {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
}

TEST(BpeModel, MergesTheLowestRankFirstAndTheLeftmostOfEqualOnes) {
  const BpeModel bpe(
      model({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}},
            {"b c", "a b", json::array({"a", "bc"}), "a a"}),
      "t.json");
  EXPECT_EQ(bpe.encode("abc"), (std::vector<int64_t>{5}));  // b c, then a bc
  EXPECT_EQ(bpe.encode("ab"), (std::vector<int64_t>{3}));
  EXPECT_EQ(bpe.encode("aaa"), (std::vector<int64_t>{6, 0}));  // leftmost pair first
  EXPECT_EQ(bpe.encode("cab"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(bpe.encode("xa"), (std::vector<int64_t>{0}));  // no unk_token: dropped
  EXPECT_EQ(*bpe.token_of(5), "abc");
  EXPECT_EQ(bpe.token_of(7), nullptr);
}

TEST(BpeModel, APairListedTwiceTakesItsLaterRankAndVersionLinesAreSkipped) {
  const BpeModel bpe(model({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}},
                           {"#version: 0.2", "a b", "b c", "a b", "a bc"}),
                     "t.json");
  EXPECT_EQ(bpe.encode("abc"), (std::vector<int64_t>{5}));  // b c first now, then a bc
}

TEST(BpeModel, UnknownCharactersFallBackToBytesOrOneFusedUnknown) {
  json spec = model({{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}}, json::array());
  spec["unk_token"] = "<unk>";
  spec["fuse_unk"] = true;
  // é, x and y: one unknown token.
  EXPECT_EQ(BpeModel(spec, "t.json").encode("a\xC3\xA9xya"), (std::vector<int64_t>{1, 0, 1}));
  spec["byte_fallback"] = true;
  EXPECT_EQ(BpeModel(spec, "t.json").encode("a\xC3\xA9xya"), (std::vector<int64_t>{1, 2, 3, 0, 1}));
  spec["byte_fallback"] = false;
  spec["fuse_unk"] = false;
  EXPECT_EQ(BpeModel(spec, "t.json").encode("xy"), (std::vector<int64_t>{0, 0}));
}

TEST(BpeModel, IgnoreMergesTakesAWholeWordFromTheVocabulary) {
  json spec = model({{"a", 0}, {"b", 1}, {"ab", 2}, {"bab", 3}}, json::array());
  EXPECT_EQ(BpeModel(spec, "t.json").encode("bab"), (std::vector<int64_t>{1, 0, 1}));
  spec["ignore_merges"] = true;
  EXPECT_EQ(BpeModel(spec, "t.json").encode("bab"), (std::vector<int64_t>{3}));
}

void expect_input_error(const json& spec, const std::string& words) {
  try {
    BpeModel(spec, "t.json");
    ADD_FAILURE() << "no error; expected " << words;
  } catch (const io::InputError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(BpeModel, RefusesWhatItCannotReadNamingTheField) {
  expect_input_error({{"type", "WordPiece"}}, "t.json: model.type must be \"BPE\"");
  expect_input_error(model({{"a", 0}}, {"a b"}), "model.merges[0] \"a b\" is not a pair");
  expect_input_error(model({{"a", -1}}, json::array()), "model.vocab[\"a\"] is not an id");
  json spec = model({{"a", 0}}, json::array());
  spec["unk_token"] = "<unk>";
  expect_input_error(spec, "model.unk_token \"<unk>\" is not in the vocabulary");
  spec = model({{"a", 0}}, json::array());
  spec["continuing_subword_prefix"] = "##";
  expect_input_error(spec, "model.continuing_subword_prefix is not supported");
  spec = model({{"a", 0}}, json::array());
  spec["fuse_unk"] = "yes";
  expect_input_error(spec, "model.fuse_unk must be true or false");
}

std::string write_tokenizer(const json& spec) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("pipetrain-tokenizer-test-" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::ofstream(path) << spec.dump();
  return path;
}

json byte_level_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes_to_unicode(std::string(1, static_cast<char>(b)))] = b;
  vocab["\xC4\xA0w"] = 256;  // "Ġw"
  return {{"model", model(vocab, {"\xC4\xA0 w"})},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"added_tokens", {{{"id", 257}, {"content", "<|end|>"}}}}};
}

TEST(HuggingFaceTokenizer, EncodesAndDecodesThroughItsStages) {
  const std::string path = write_tokenizer(byte_level_tokenizer());
  const auto tokenizer = make_tokenizer(path, 300);
  EXPECT_EQ(tokenizer->encode("a w<|end|>"), (std::vector<int64_t>{'a', 256, 257}));
  EXPECT_EQ(tokenizer->decode({'a', 256, 257, 0xC3, 0xA9}), "a w<|end|>\xC3\xA9");
  EXPECT_EQ(tokenizer->vocab_size(), 258);
  EXPECT_THROW(tokenizer->encode("\xFF"), io::InputError);
  std::filesystem::remove(path);
}

TEST(HuggingFaceTokenizer, RefusesStagesItDoesNotHaveNamingThem) {
  json spec = byte_level_tokenizer();
  spec["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}}}};
  const std::string path = write_tokenizer(spec);
  try {
    make_tokenizer(path, 300);
    ADD_FAILURE() << "Lowercase accepted";
  } catch (const io::InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              path +
                  ": normalizer.normalizers[0].type \"Lowercase\" is not supported (Sequence, "
                  "Prepend, Replace, NFC, NFD, NFKC, NFKD)");
  }
  spec = byte_level_tokenizer();
  spec["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  std::ofstream(path) << spec.dump();
  EXPECT_THROW(make_tokenizer(path, 300), io::InputError);
  EXPECT_THROW(make_tokenizer(path + ".missing.json", 300), io::InputError);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace pipetrain::data
