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
  bool no_special_tokens = false;
  bool pair = false;
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
  const data::SpecialTokens special =
      options.no_special_tokens ? data::SpecialTokens::kOmit : data::SpecialTokens::kAdd;
  if (options.pair && (options.decode || inputs.size() % 2 != 0))
    throw io::InputError("--pair: give the texts two by two (and no --decode)");
  for (size_t k = 0; k < inputs.size(); k += options.pair ? 2 : 1) {
    const std::string& input = inputs[k];
    if (options.decode) {
      std::cout << tokenizer->decode(read_ids(input, *tokenizer)) << "\n";
      continue;
    }
    const std::vector<int64_t> ids = options.pair
                                         ? tokenizer->encode_pair(input, inputs[k + 1], special)
                                         : tokenizer->encode(input, special);
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
      "Print the token ids of each TEXT (standard input when none), a line each, as "
      "transformers' encode gives them (special tokens added), or with --decode the text of "
      "each comma-separated list of ids");
  command
      ->add_option("--tokenizer", options->tokenizer,
                   "A Hugging Face tokenizer.json or a SentencePiece .model (empty: bytes)")
      ->required();
  command->add_flag("--decode", options->decode, "Read token ids, print text");
  command->add_flag("--no-special-tokens", options->no_special_tokens,
                    "Encode without the special tokens the tokenizer's post-processor adds "
                    "(transformers' add_special_tokens=False)");
  command->add_flag("--pair", options->pair,
                    "Encode the texts two by two as pairs (the post-processor's pair template)");
  // The texts are the arguments left after the options, taken as written ("[CLS]" or
  // "[INST] ..." is text, where CLI11 would read a list); one starting with "-" is an
  // unknown option.
  command->allow_extras();
  command->footer("Arguments: TEXT... (or id lists with --decode)");
  return {command, [options, command] {
            options->inputs = command->remaining();
            for (const std::string& input : options->inputs) {
              if (input.size() > 1 && input[0] == '-')
                throw io::InputError("tokenize: unknown option " + input);
            }
            return tokenize(*options);
          }};
}

}  // namespace pipetrain::cli
