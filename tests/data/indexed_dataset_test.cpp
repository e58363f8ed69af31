#include "data/indexed_dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include "data/examples.h"
#include "data/token_data.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::data {
namespace {

namespace fs = std::filesystem;

// The tokens tests/data/write_indexed.py puts in document d, in order.
std::vector<int64_t> expected_tokens(int documents) {
  std::vector<int64_t> tokens;
  for (int d = 0; d < documents; ++d) {
    for (int j = 0; j < 5 + d % 11; ++j) tokens.push_back((7 * d + j) % 1000);
    tokens.push_back(999);
  }
  return tokens;
}

class IndexedDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() / ("indexed-test-" + std::to_string(::getpid()));
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }

  // Writes PREFIX.bin/.idx with Megatron's layout through the Python writer.
  std::string write(const std::string& name, const std::string& dtype, int documents,
                    const std::string& damage = "") {
    const std::string prefix = (folder_ / name).string();
    const std::string command = "python3 " PIPETRAIN_SOURCE_DIR "/tests/data/write_indexed.py " +
                                prefix + " " + dtype + " " + std::to_string(documents) + " " +
                                damage;
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return prefix;
  }

  fs::path folder_;
};

TEST_F(IndexedDatasetTest, ReadsBackTokenForTokenAcrossFilesAndDtypes) {
  const std::string a = write("a", "uint16", 40);
  const std::string b = write("b", "int32", 25);
  const IndexedTokens tokens({a, b + ".bin"});  // a prefix, or a file of the pair
  std::vector<int64_t> expected = expected_tokens(40);
  const std::vector<int64_t> second = expected_tokens(25);
  expected.insert(expected.end(), second.begin(), second.end());
  ASSERT_EQ(tokens.size(), static_cast<int64_t>(expected.size()));
  EXPECT_EQ(tokens.documents(), 65);
  std::vector<int64_t> read(expected.size());
  tokens.read(0, tokens.size(), 1000, read.data());
  EXPECT_EQ(read, expected);
  // A window across the boundary of the two files.
  const int64_t boundary = static_cast<int64_t>(expected_tokens(40).size());
  std::vector<int64_t> window(9);
  tokens.read(boundary - 4, 9, 1000, window.data());
  EXPECT_EQ(window,
            std::vector<int64_t>(expected.begin() + boundary - 4, expected.begin() + boundary + 5));
}

// Packed documents told apart by the document index give the windows the end-of-document
// id gives, where each document ends with it (as write_indexed.py writes them): two files,
// windows across their boundary, the validation part's offset.
TEST_F(IndexedDatasetTest, DocumentsByIndexEqualDocumentsByTheirEndId) {
  const std::vector<std::string> files{write("a", "uint16", 40), write("b", "int32", 25)};
  EXPECT_EQ(IndexedTokens(files).document_starts(), nullptr);            // kept only when asked
  ASSERT_EQ(IndexedTokens(files, true).document_starts()->size(), 64u);  // the first at 0
  const TokenCorpus corpus = indexed_corpus(files, 1000, 0.25, /*record_documents=*/true);
  for (const TokenSpan& part : {corpus.train, corpus.validation}) {
    SequenceSource by_id(part, 1000, 12, 8, 5, 0, {}, DocumentSplit{.end_id = 999});
    SequenceSource by_index(part, 1000, 12, 8, 5, 0, {}, DocumentSplit{.by_index = true});
    for (int draw = 0; draw < 40; ++draw) {
      const engine::MicroBatch a = by_id.next(), b = by_index.next();
      ASSERT_TRUE(at::equal(a.inputs.at(0), b.inputs.at(0)));
      ASSERT_TRUE(at::equal(a.inputs.at(1), b.inputs.at(1))) << "draw " << draw;
    }
  }
  // A window starting on a document's first token counts it as document 0.
  const std::vector<int64_t> starts{5, 9};
  EXPECT_TRUE(at::equal(documents_from_starts(at::tensor({5, 3}, at::kLong), 4, starts),
                        at::tensor({0, 0, 0, 0, 0, 0, 1, 1}, at::kLong).view({2, 4})));
}

// A layout's view of the data: `replicas` data-parallel replicas, micro-batches of `batch`
// rows, `micro_batches` of them per step (global batch batch x micro_batches x replicas).
struct Layout {
  int64_t replicas, batch, micro_batches;
};
using SourceOf =
    std::function<std::unique_ptr<engine::MicroBatchSource>(int64_t batch, SampleShare share)>;
using Rows = std::vector<std::vector<double>>;  // every tensor of a sample, flattened

// The samples of `steps` global batches at `layout` from `from` (a state to resume at, or
// null), each global batch's rows sorted: what a step trains on whatever the order.
std::vector<Rows> global_batches(const SourceOf& source_of, Layout layout, int steps,
                                 const nlohmann::json& from, nlohmann::json* after = nullptr) {
  std::vector<std::unique_ptr<engine::MicroBatchSource>> replicas;
  for (int64_t r = 0; r < layout.replicas; ++r) {
    replicas.push_back(source_of(layout.batch, {r, layout.replicas}));
    if (!from.is_null()) replicas.back()->restore(from);
  }
  std::vector<Rows> batches;
  for (int step = 0; step < steps; ++step) {
    Rows rows;
    for (auto& replica : replicas) {
      for (int64_t j = 0; j < layout.micro_batches; ++j) {
        const engine::MicroBatch micro = replica->next();
        for (int64_t i = 0; i < layout.batch; ++i) {
          std::vector<double> row;
          for (const comm::TensorList* part : {&micro.inputs, &micro.labels}) {
            for (const at::Tensor& t : *part) {
              const at::Tensor flat = t[i].flatten().to(at::kDouble).contiguous();
              row.insert(row.end(), flat.data_ptr<double>(),
                         flat.data_ptr<double>() + flat.numel());
            }
          }
          rows.push_back(std::move(row));
        }
      }
    }
    std::sort(rows.begin(), rows.end());
    batches.push_back(std::move(rows));
  }
  if (after) *after = replicas.front()->state();
  return batches;
}

// Every layout of one global batch (8) reads the same samples in each global batch, and a
// position saved at one layout resumes at another on the very next global batch.
void expect_global(const SourceOf& source_of) {
  const std::vector<Layout> layouts{{1, 8, 1}, {1, 2, 4}, {2, 2, 2}, {2, 4, 1}, {4, 1, 2}};
  const std::vector<Rows> reference = global_batches(source_of, layouts.front(), 5, nullptr);
  ASSERT_NE(reference[0], reference[1]);
  for (const Layout& layout : layouts) {
    EXPECT_EQ(global_batches(source_of, layout, 5, nullptr), reference)
        << "data " << layout.replicas << " x micro-batch " << layout.batch;
  }
  for (const Layout& saved : layouts) {
    nlohmann::json position;
    global_batches(source_of, saved, 2, nullptr, &position);
    EXPECT_EQ(position, (nlohmann::json{{"samples", 16}}));
    for (const Layout& resumed : layouts) {
      const std::vector<Rows> next = global_batches(source_of, resumed, 3, position);
      EXPECT_EQ(next, std::vector<Rows>(reference.begin() + 2, reference.end()))
          << "saved at data " << saved.replicas << ", resumed at data " << resumed.replicas;
    }
  }
  // A position inside a micro-batch of the resuming layout cannot be taken.
  EXPECT_THROW(source_of(4, {0, 2})->restore(nlohmann::json{{"samples", 12}}), io::InputError);
  EXPECT_THROW(source_of(4, {0, 2})->restore(nlohmann::json{{"drawn", 3}}), io::InputError);
}

TEST_F(IndexedDatasetTest, TokenWindowsAreGlobalBatchesAtEveryLayout) {
  const TokenCorpus corpus = indexed_corpus({write("w", "uint16", 60)}, 1000, 0.2, true);
  for (const DocumentSplit documents : {DocumentSplit{}, DocumentSplit{.by_index = true}}) {
    expect_global([&](int64_t batch, SampleShare share) {
      return std::make_unique<SequenceSource>(corpus.train, 1000, 12, batch, 5, 0, share,
                                              documents);
    });
  }
}

TEST_F(IndexedDatasetTest, RegressionSamplesAreGlobalBatchesAtEveryLayout) {
  expect_global([](int64_t batch, SampleShare share) {
    return std::make_unique<RegressionSource>(3, 2, batch, 5, 0, share);
  });
}

// Fine-tuning examples, one per row and packed: masks beside the tokens (every third token
// trained).
TEST_F(IndexedDatasetTest, ExamplesAreGlobalBatchesAtEveryLayout) {
  const std::string prefix = write("e", "uint16", 70);
  const int64_t tokens = IndexedTokens({prefix}).size();
  std::ofstream mask(prefix + ".mask", std::ios::binary);
  for (int64_t t = 0; t < tokens; ++t) mask.put(static_cast<char>(t % 3 == 0));
  mask.close();
  for (const bool pack : {false, true}) {
    auto corpus =
        std::make_shared<const ExampleCorpus>(example_corpus({prefix}, 1000, 20, pack, 0.1));
    expect_global([&](int64_t batch, SampleShare share) {
      return std::make_unique<ExampleSource>(corpus, false, 1000, 20, batch, 5, 0, share, pack);
    });
  }
}

TEST_F(IndexedDatasetTest, RefusesAnIdOutsideTheVocabularyAsItIsRead) {
  const IndexedTokens tokens({write("v", "uint16", 10)});
  std::vector<int64_t> window(6);
  EXPECT_THROW(tokens.read(0, 6, 999, window.data()), io::InputError);  // 999 ends document 0
  EXPECT_NO_THROW(tokens.read(0, 5, 999, window.data()));
}

TEST_F(IndexedDatasetTest, RefusesDamagedFilesNamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"magic", ".idx: not a Megatron indexed dataset index (no MMIDIDX header)"},
      {"version", ".idx: index version 2, only 1 is read"},
      {"float", ".idx: dtype code 6 is a floating-point type, not token ids"},
      {"truncated-bin", "(truncated or mismatched)"},
      {"pointer", "does not follow the one before it"},
      {"document-index", ".idx: document index entry 2 is 25, not a sequence boundary in order"},
      {"count", "do not fit in its"},
  };
  for (const auto& [damage, message] : cases) {
    const std::string prefix = write(damage, "uint16", 20, damage);
    try {
      IndexedTokens tokens({prefix});
      ADD_FAILURE() << damage << ": opened";
    } catch (const io::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
          << damage << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(prefix), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(IndexedTokens({(folder_ / "missing").string()}), io::InputError);
}

}  // namespace
}  // namespace pipetrain::data
