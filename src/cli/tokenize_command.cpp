// `pipetrain tokenize`: text to token ids and back with a tokenizer pipetrain reads, the
// way prompts are encoded and samples decoded.
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "data/tokenizer.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  bool decode = false;
  std::vector<std::string> inputs;
};

std::vector<int64_t> read_ids(const std::string& text, const data::Tokenizer& tokenizer) {
  std::vector<int64_t> ids;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    try {
      size_t used = 0;
      const int64_t id = std::stoll(item, &used);
      if (used != item.size() || id < 0 || id >= tokenizer.vocab_size())
        throw std::out_of_range("");
      ids.push_back(id);
    } catch (const std::logic_error&) {
      throw io::InputError("--decode: " + item + " is not a token id in [0, " +
                           std::to_string(tokenizer.vocab_size()) + ")");
    }
  }
  return ids;
}

int tokenize(const TokenizeOptions& options) {
  // The tokenizer's own vocabulary is the only bound here.
  const auto tokenizer = data::make_tokenizer(options.tokenizer, int64_t{1} << 24);
  std::vector<std::string> inputs = options.inputs;
  if (inputs.empty())
    inputs.emplace_back(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  for (const std::string& input : inputs) {
    if (options.decode) {
      std::cout << tokenizer->decode(read_ids(input, *tokenizer)) << "\n";
      continue;
    }
    const std::vector<int64_t> ids = tokenizer->encode(input);
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

Command add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* command = app.add_subcommand(
      "tokenize",
      "Print the token ids of each TEXT (standard input when none), a line each, or with "
      "--decode the text of each comma-separated list of ids");
  command
      ->add_option("--tokenizer", options->tokenizer,
                   "A Hugging Face tokenizer.json or a SentencePiece .model (empty: bytes)")
      ->required();
  command->add_flag("--decode", options->decode, "Read token ids, print text");
  command->add_option("inputs", options->inputs, "Texts (or id lists with --decode)");
  return {command, [options] { return tokenize(*options); }};
}

}  // namespace pipetrain::cli
