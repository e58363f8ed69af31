#include "trainer/generation/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "data/tokenizer.h"
#include "io/read_file.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/config/json_value.h"
#include "pipetrain/io/errors.h"
#include "trainer/generation/sampling.h"
#include "trainer/job.h"
#include "trainer/model_files.h"

namespace pipetrain::trainer {
namespace fs = std::filesystem;
namespace {

// --format: each prompt's text, or one JSON object per prompt.
enum class OutputFormat { kText, kJsonl };
OutputFormat output_format(const std::string& text) {
  static const config::Names<OutputFormat> names{{"text", OutputFormat::kText},
                                                 {"jsonl", OutputFormat::kJsonl}};
  for (const auto& [name, format] : names) {
    if (name == text) return format;
  }
  throw io::InputError("--format must be text or jsonl, got '" + text + "'");
}

// Samples per micro-batch when generating from a checkpoint.
constexpr int64_t kGenerateMicroBatch = 1;

// Bounds on the work one generate command asks for: new tokens per prompt, and prompts
// in flight (each with its KV cache).
constexpr int64_t kMaxNewTokens = int64_t{1} << 20;
constexpr int64_t kMaxInFlight = 1024;

// One prompt to continue, with its own bounds.
struct PromptLine {
  std::string text;
  int64_t tokens = 0;          // new tokens at most
  std::vector<int64_t> stop;   // besides --stop
  std::string where;           // "--prompt", or "FILE:LINE"
  std::vector<int64_t> ids{};  // the prompt as token ids (then `text` is empty)
};

// A prompts file's line: its text, or a JSON object {"prompt": text, "max_new_tokens": n,
// "stop": [ids]} (the last two optional), or with "ids": [token ids] in place of "prompt"
// (a conversation rendered with the model's chat template, as prepare-data --prompts
// writes it: no special tokens added again).
PromptLine prompt_line(const std::string& line, const std::string& where, int64_t tokens) {
  if (line.front() != '{') return {line, tokens, {}, where};
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw io::InputError(where + ": not a JSON object (" + e.what() + ")");
  }
  PromptLine prompt{"", tokens, {}, where};
  for (const auto& [key, value] : object.items()) {
    if (key == "prompt" && value.is_string()) {
      prompt.text = value.get<std::string>();
    } else if (key == "ids" && value.is_array() && !value.empty() &&
               std::all_of(value.begin(), value.end(), [](const nlohmann::json& id) {
                 return id.is_number_integer() && id.get<int64_t>() >= 0;
               })) {
      prompt.ids = value.get<std::vector<int64_t>>();
    } else if (key == "max_new_tokens" && value.is_number_integer() && value.get<int64_t>() >= 1 &&
               value.get<int64_t>() <= kMaxNewTokens) {
      prompt.tokens = value.get<int64_t>();
    } else if (key == "stop" && value.is_array() &&
               std::all_of(value.begin(), value.end(),
                           [](const nlohmann::json& id) { return id.is_number_integer(); })) {
      prompt.stop = value.get<std::vector<int64_t>>();
    } else {
      throw io::InputError(
          where + ": \"" + key +
          "\" must be one of prompt (a string), ids (token ids), max_new_tokens (an integer "
          "in 1.." +
          std::to_string(kMaxNewTokens) + "), stop (token ids)");
    }
  }
  if (!prompt.text.empty() && !prompt.ids.empty())
    throw io::InputError(where + ": \"prompt\" and \"ids\" both given: keep one");
  if (prompt.text.empty() && prompt.ids.empty())
    throw io::InputError(where + ": no \"prompt\" (a non-empty string) or \"ids\"");
  return prompt;
}

// The prompts to continue, checked before any work: --prompt's, then the file's lines.
std::vector<PromptLine> prompts_of(const GenerateOptions& options) {
  if (options.tokens < 1 || options.tokens > kMaxNewTokens) {
    throw io::InputError("--tokens must be in 1.." + std::to_string(kMaxNewTokens) + ", got " +
                         std::to_string(options.tokens));
  }
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature)) {
    std::ostringstream value;
    value << options.temperature;
    throw io::InputError("--temperature must be a finite number at least 0 (0: greedy), got " +
                         value.str());
  }
  if (options.top_k < 0)
    throw io::InputError("--top-k must be at least 0 (0: all tokens), got " +
                         std::to_string(options.top_k));
  if (!(options.top_p > 0 && options.top_p <= 1)) {
    std::ostringstream value;
    value << options.top_p;
    throw io::InputError("--top-p must be in (0, 1], got " + value.str());
  }
  output_format(options.format);  // refused before any work
  if (options.max_in_flight < 1 || options.max_in_flight > kMaxInFlight) {
    throw io::InputError("--max-in-flight must be in 1.." + std::to_string(kMaxInFlight) +
                         ", got " + std::to_string(options.max_in_flight));
  }
  std::vector<PromptLine> prompts;
  for (const auto& prompt : options.prompts) {
    if (prompt.empty())
      throw io::InputError("--prompt is empty: sampling needs at least one byte to start");
    prompts.push_back({prompt, options.tokens, {}, "--prompt"});
  }
  if (!options.prompts_file.empty()) {
    std::istringstream lines(io::read_file(options.prompts_file));
    int number = 0;
    for (std::string line; std::getline(lines, line);) {
      ++number;
      if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
      if (line.empty()) continue;
      prompts.push_back(
          prompt_line(line, options.prompts_file + ":" + std::to_string(number), options.tokens));
    }
    if (prompts.size() == options.prompts.size())
      throw io::InputError(options.prompts_file + ": no prompts in it (one per line)");
  }
  if (prompts.empty()) prompts.push_back({"The ", options.tokens, {}, "--prompt"});
  return prompts;
}

}  // namespace

int generate_from_checkpoint(const GenerateOptions& options) {
  const std::vector<PromptLine> prompts = prompts_of(options);
  const int ranks = comm::MpiCommunicator::world()->size();
  Job job = build_job(config_of_checkpoint(options.checkpoint, kGenerateMicroBatch,
                                           forward_layout(ranks, options.tensor_parallel)),
                      options.checkpoint, DataUse::kNone);
  const auto* tokens = job.model.tokens();
  if (!tokens)
    throw io::InputError("generate needs a language model checkpoint (model.type " +
                         models::builtin_types_reading(true) + ")");
  // The tokenizer named here, else the one the model trained with (sample.tokenizer).
  const auto tokenizer = data::make_tokenizer(
      options.tokenizer.empty() ? job.config.trainer.sample.tokenizer : options.tokenizer,
      tokens->vocab_size);
  const auto check_stop = [&](const std::vector<int64_t>& ids, const std::string& where) {
    for (const int64_t id : ids) {
      if (id < 0 || id >= tokens->vocab_size) {
        throw io::InputError(where + std::to_string(id) + " is outside the vocabulary of " +
                             std::to_string(tokens->vocab_size));
      }
    }
  };
  check_stop(options.stop, "--stop ");
  // The model's end-of-sequence ids end a prompt's generation unless --no-stop.
  std::vector<int64_t> stop = options.stop;
  if (options.stop_at_end) {
    const models::ModelConfig& model = job.config.model;
    std::vector<int64_t> model_ends = model.eos_token_ids;
    if (model_ends.empty() && model.eos_token_id >= 0) model_ends.push_back(model.eos_token_id);
    const fs::path files = model_files_folder(job.effective, options.checkpoint);
    for (const int64_t id : end_of_sequence_ids(files, model_ends)) {
      if (id < tokens->vocab_size && std::find(stop.begin(), stop.end(), id) == stop.end())
        stop.push_back(id);
    }
  }
  std::vector<PromptRequest> requests;
  for (const auto& prompt : prompts) {
    check_stop(prompt.stop, prompt.where + ": stop token ");
    check_stop(prompt.ids, prompt.where + ": token ");
    const std::vector<int64_t> encoded =
        prompt.ids.empty() ? tokenizer->encode(prompt.text) : prompt.ids;
    if (encoded.empty())
      throw io::InputError(prompt.where + " '" + prompt.text +
                           "': the tokenizer gives no tokens for it");
    if (static_cast<int64_t>(encoded.size()) > tokens->context) {
      const std::string& text = prompt.text;
      std::size_t cut = std::min<std::size_t>(text.size(), 40);
      while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
        --cut;  // not inside a UTF-8 character
      throw io::InputError(
          prompt.where + ": prompt '" + text.substr(0, cut) + (cut < text.size() ? "..." : "") +
          "' is " + std::to_string(encoded.size()) +
          " tokens, longer than the model's context of " + std::to_string(tokens->context));
    }
    requests.push_back({encoded, prompt.tokens, prompt.stop});
  }
  checkpoint::load_checkpoint(*job.engine, options.checkpoint, "latest");
  const SamplingOptions sampling{.temperature = options.temperature,
                                 .top_k = options.top_k,
                                 .seed = options.seed,
                                 .top_p = options.top_p,
                                 .stop = stop,
                                 .kv_cache = options.kv_cache,
                                 .max_in_flight = options.max_in_flight};
  // In flight: every prompt's seconds are the batch's.
  std::vector<std::vector<int64_t>> texts;
  std::vector<double> seconds;
  const auto since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  if (options.in_flight) {
    const auto start = std::chrono::steady_clock::now();
    texts = sample_in_flight(*job.engine, requests, sampling, tokens->context);
    seconds.assign(texts.size(), since(start));
  } else {
    for (const auto& request : requests) {
      const auto start = std::chrono::steady_clock::now();
      texts.push_back(sample_in_flight(*job.engine, {request}, sampling, tokens->context).front());
      seconds.push_back(since(start));
    }
  }
  for (std::size_t p = 0; p < prompts.size() && job.grid->global_rank() == 0; ++p) {
    const auto& text = texts[p];
    if (output_format(options.format) == OutputFormat::kText) {
      std::printf("%s\n", tokenizer->decode(text).c_str());
      continue;
    }
    const std::vector<int64_t>& prompt = requests[p].tokens;
    const std::vector<int64_t> fresh(text.begin() + prompt.size(), text.end());
    // The whole text's rest after the prompt where it starts with it (tokenizers may decode
    // a token differently at the start), else the new tokens alone.
    const std::string whole = tokenizer->decode(text), start = tokenizer->decode(prompt);
    const std::string completion =
        whole.rfind(start, 0) == 0 ? whole.substr(start.size()) : tokenizer->decode(fresh);
    const nlohmann::json line = {{"prompt", prompts[p].ids.empty() ? prompts[p].text : start},
                                 {"completion", completion},
                                 {"tokens", fresh},
                                 {"seconds", seconds[p]}};
    std::printf("%s\n",
                line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

}  // namespace pipetrain::trainer
