// The key table alone: reading with named errors, bounds and choices, keys that hold only
// for some configs, unknown keys, the effective config written back and read again, docs.
#include <gtest/gtest.h>

#include "pipetrain/config/key_table.h"
#include "pipetrain/config/unknown_keys.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::config {
namespace {

enum class Shape { kRound, kSquare };

struct Toy {
  int64_t count = 3;
  double ratio = 0.5;
  bool loud = false;
  std::string name = "toy";
  Shape shape = Shape::kRound;
  int64_t corners = 4;  // square only
  std::vector<std::string> tags{"a"};
  nlohmann::json extra = nlohmann::json::object();
};

KeyTable<Toy> toy_keys() {
  KeyTable<Toy> t;
  t.integer("count", PIPETRAIN_FIELD(count), "how many", at_least(1))
      .number("inner.ratio", PIPETRAIN_FIELD(ratio), "a share", within(0, 1))
      .flag("inner.loud", PIPETRAIN_FIELD(loud), "whether loud")
      .text("name", PIPETRAIN_FIELD(name), "its name")
      .texts("tags", PIPETRAIN_FIELD(tags), "labels")
      .object("extra", PIPETRAIN_FIELD(extra), "kept whole")
      .choice("shape", PIPETRAIN_FIELD(shape),
              Names<Shape>{{"round", Shape::kRound}, {"square", Shape::kSquare}}, "its shape");
  t.when([](const Toy& c) { return c.shape == Shape::kSquare; }, "square")
      .integer("corners", PIPETRAIN_FIELD(corners), "corners");
  return t;
}

std::string error_of(const char* text) {
  Toy toy;
  try {
    toy_keys().read(nlohmann::json::parse(text), toy);
  } catch (const io::InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(KeyTable, SetsAndErasesOnlyKeysItDeclares) {
  const KeyTable<Toy> keys = toy_keys();
  nlohmann::json json = nlohmann::json::parse(R"({"count": 2, "inner": {"ratio": 0.1}})");
  keys.set(json, "inner.loud", true);
  keys.set(json, "extra.deep", 1);  // inside a key kept whole
  keys.erase(json, "count");
  keys.erase(json, "name");  // absent: nothing to do
  EXPECT_EQ(json, nlohmann::json::parse(
                      R"({"inner": {"ratio": 0.1, "loud": true}, "extra": {"deep": 1}})"));
  keys.erase(json, "inner");  // a section
  EXPECT_EQ(json, nlohmann::json::parse(R"({"extra": {"deep": 1}})"));
  EXPECT_THROW(keys.set(json, "inner.lous", true), std::logic_error);
  EXPECT_THROW(keys.erase(json, "coun"), std::logic_error);
  // A set value passes the key's checks when the config is read.
  keys.set(json, "count", 0);
  Toy toy;
  EXPECT_THROW(keys.read(json, toy), io::InputError);
  // A section written as null is taken as absent.
  json = nlohmann::json::parse(R"({"inner": null})");
  keys.set(json, "inner.ratio", 0.5);
  EXPECT_EQ(json, nlohmann::json::parse(R"({"inner": {"ratio": 0.5}})"));
  // A file with a value where the section should be: bad input, named.
  json = nlohmann::json::parse(R"({"inner": 3})");
  try {
    keys.set(json, "inner.ratio", 0.5);
    ADD_FAILURE() << "set through a number";
  } catch (const io::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("inner must be an object"), std::string::npos) << e.what();
  }
}

TEST(KeyTable, ReadsTypedValuesAndListsUnknownKeys) {
  Toy toy;
  const auto unknown = toy_keys().read(
      nlohmann::json::parse(R"({"count": 7, "inner": {"ratio": 0.25, "loud": true, "x": 1},
        "tags": "solo", "extra": {"any": [1]}, "shape": "square", "corners": 5, "y": {}})"),
      toy);
  EXPECT_EQ(toy.count, 7);
  EXPECT_DOUBLE_EQ(toy.ratio, 0.25);
  EXPECT_TRUE(toy.loud);
  EXPECT_EQ(toy.name, "toy");  // absent: the default stays
  EXPECT_EQ(toy.tags, std::vector<std::string>{"solo"});
  EXPECT_EQ(toy.extra, nlohmann::json::parse(R"({"any": [1]})"));
  EXPECT_EQ(toy.shape, Shape::kSquare);
  EXPECT_EQ(toy.corners, 5);
  EXPECT_EQ(unknown, (std::vector<std::string>{"inner.x", "y"}));
}

TEST(KeyTable, KeysOfAGroupAreUnknownWhereTheGroupDoesNotHold) {
  Toy toy;
  const auto unknown =
      toy_keys().read(nlohmann::json::parse(R"({"shape": "round", "corners": 5})"), toy);
  EXPECT_EQ(toy.corners, 4);
  EXPECT_EQ(unknown, std::vector<std::string>{"corners"});
}

TEST(KeyTable, NamesTheKeyOfABadValue) {
  EXPECT_EQ(error_of(R"({"count": "7"})"), R"(count must be an integer, got "7")");
  EXPECT_EQ(error_of(R"({"count": 0})"), "count must be at least 1, got 0");
  EXPECT_EQ(error_of(R"({"inner": {"ratio": 1.5}})"), "inner.ratio must be in [0, 1], got 1.5");
  EXPECT_EQ(error_of(R"({"inner": []})"), "inner must be an object, got []");
  EXPECT_EQ(error_of(R"({"inner": {"loud": 1}})"), "inner.loud must be true or false, got 1");
  EXPECT_EQ(error_of(R"({"shape": "oval"})"), R"(shape must be "round" or "square", got "oval")");
  EXPECT_EQ(error_of(R"({"tags": [1]})"), "tags must be a string or a list of strings");
  EXPECT_EQ(error_of(R"({"extra": 2})"), "extra must be an object, got 2");
  EXPECT_EQ(error_of("[]"), "the config must be a JSON object");
}

TEST(KeyTable, WritesAnEffectiveConfigThatReadsBackTheSame) {
  Toy toy;
  toy_keys().read(nlohmann::json::parse(R"({"count": 2, "shape": "square", "corners": 6})"), toy);
  const nlohmann::json written = toy_keys().write(toy);
  EXPECT_EQ(written["inner"]["ratio"], 0.5);
  EXPECT_EQ(written["shape"], "square");
  EXPECT_EQ(written["corners"], 6);
  Toy again;
  EXPECT_TRUE(toy_keys().read(written, again).empty());
  EXPECT_EQ(toy_keys().write(again), written);
  EXPECT_FALSE(toy_keys().write(Toy{}).contains("corners"));  // round: no corners
}

TEST(KeyTable, DocumentsEveryKeyWithItsDefault) {
  const auto docs = toy_keys().docs();
  ASSERT_EQ(docs.size(), 8u);
  EXPECT_EQ(docs[0].key, "count");
  EXPECT_EQ(docs[0].type, "int");
  EXPECT_EQ(docs[0].fallback, "3");
  EXPECT_EQ(docs[6].type, "one of `round` `square`");
  EXPECT_EQ(docs[6].fallback, R"("round")");
  EXPECT_EQ(docs[7].help, "corners (square)");
}

TEST(KeyTable, IncludesAnotherTableForAPartOfALargerConfig) {
  struct Pair {
    Toy left;
    Toy right;
  };
  KeyTable<Pair> pair;
  pair.include(toy_keys(), PIPETRAIN_FIELD(left));
  Pair p;
  const auto unknown =
      pair.read(nlohmann::json::parse(R"({"shape": "square", "corners": 8, "z": 1})"), p);
  EXPECT_EQ(p.left.corners, 8);
  EXPECT_EQ(p.right.corners, 4);
  EXPECT_EQ(unknown, std::vector<std::string>{"z"});
}

TEST(UnknownKeys, SuggestOnlyNamesCloseToTheLastPart) {
  const std::vector<std::string> known = {"optimizer.type", "optimizer.params.lr", "train_iters",
                                          "pipeline.schedule"};
  EXPECT_EQ(closest_name("optimzer.type", known), "optimizer.type");
  EXPECT_EQ(closest_name("train_itres", known), "train_iters");  // a swap is one edit
  EXPECT_EQ(closest_name("optimizer.params.nesterov", known), std::nullopt);
  EXPECT_EQ(closest_name("zz", known), std::nullopt);
  EXPECT_EQ(describe_unknown_keys({"train_iter", "zz"}, known),
            "unknown keys train_iter (did you mean train_iters?), zz");
  EXPECT_EQ(describe_unknown_keys({}, known), "");
  EXPECT_THROW(refuse_unknown_keys({"zz"}, known), io::InputError);
  EXPECT_NO_THROW(refuse_unknown_keys({}, known));
}

TEST(UnknownKeys, AnAliasMovesToItsSectionUnlessBothAreThere) {
  nlohmann::json json = {{"bfloat16", {{"enabled", true}}}};
  accept_alias(json, "bfloat16", "bf16");
  EXPECT_EQ(json, nlohmann::json({{"bf16", {{"enabled", true}}}}));
  json["bfloat16"] = {{"enabled", false}};
  EXPECT_THROW(accept_alias(json, "bfloat16", "bf16"), io::InputError);
}

}  // namespace
}  // namespace pipetrain::config
