#include "trainer/trainer.h"

#include "resume.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "checkpoint/background_save.h"
#include "comm/stop_signals.h"
#include "data/tokenizer.h"
#include "device/cuda.h"
#include "io/activity.h"
#include "io/atomic_file.h"
#include "io/folder_lock.h"
#include "io/rank_record.h"
#include "io/read_file.h"
#include "launch/job_ending.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/expert_parallel/all_to_all.h"
#include "pipetrain/io/errors.h"
#include "tensorboard/tensorboard_writer.h"
#include "trainer/device_report.h"
#include "trainer/expert_statistics.h"
#include "trainer/generation/sampling.h"
#include "trainer/job.h"
#include "trainer/metrics_log.h"
#include "trainer/model_files.h"
#include "trainer/model_flops.h"
#include "trainer/optimizer_report.h"
#include "trainer/output_paths.h"
#include "trainer/progress_line.h"
#include "trainer/trace.h"

namespace pipetrain::trainer {
namespace fs = std::filesystem;
namespace {

// " grad norm N": the global gradient norm before clipping, as every peer's progress line
// shows it.
std::string grad_norm_summary(double norm) {
  if (std::isnan(norm)) return "";
  char text[48];
  std::snprintf(text, sizeof text, " grad norm %.4g", norm);
  return text;
}

using Clock = std::chrono::steady_clock;

// Weight of the past in the smoothed step time of the progress line.
constexpr double kSpeedSmoothing = 0.9;
// Samples per micro-batch when evaluating a checkpoint.
constexpr int64_t kEvalMicroBatch = 8;

// One training step as measured on this rank.
struct StepResult {
  int64_t step = 0;  // 1-based
  double loss = 0;
  double seconds = 0;
  nlohmann::json timings_ms;  // per instruction kind
  std::optional<double> validation_loss{};
  int64_t all_to_all_bytes = 0;  // this rank's, by expert parallelism, in the step alone
  std::optional<double> save_stall_seconds{};  // a background save's hold on the step
  std::optional<double> save_seconds{};        // a synchronous save's, after the step
  std::map<std::string, double> objective;     // an objective's metrics (TRL's names for DPO's)
};

// " rewards/margins 0.01 ...": an objective's metrics (DPO's as TRL names them).
std::string objective_summary(const std::map<std::string, double>& metrics) {
  std::string text;
  for (const auto& [name, value] : metrics) {
    char item[80];
    std::snprintf(item, sizeof item, " %s %.4g", name.c_str(), value);
    text += item;
  }
  return text;
}

// Milliseconds this rank spent per instruction kind between two readings of its timers.
nlohmann::json timings_since(const engine::InstructionTimers& before,
                             const engine::InstructionTimers& after) {
  nlohmann::json timings = nlohmann::json::object();
  for (int k = 0; k < schedule::kNumOpKinds; ++k) {
    const auto kind = static_cast<schedule::OpKind>(k);
    const double ms = (after.seconds(kind) - before.seconds(kind)) * 1e3;
    if (ms > 0) timings[std::string(schedule::name(kind))] = ms;
  }
  return timings;
}

// Whether `step` ends an interval (0: only the last step does).
bool due(int64_t step, int64_t interval, int64_t last) {
  return (interval > 0 && step % interval == 0) || step == last;
}

// What global rank 0 reports of a run: the progress line, metrics files, TensorBoard.
class RunLog {
 public:
  explicit RunLog(const Job& job)
      : job_(job),
        leader_(job.grid->global_rank() == 0),
        on_gpus_(any_rank_on_gpu(*job.engine)),
        reports_memory_(on_gpus_ || job.config.trainer.memory_breakdown),
        experts_(models::capabilities(job.config.model).routed_experts),
        flops_per_step_(model_flops_per_sample(job.config.model) *
                        static_cast<double>(job.config.engine.train_batch_size)),
        peak_flops_(peak_flops(job)),
        progress_(job.config.trainer.train_iters, job.config.engine.steps_per_print) {
    if (!leader_) return;
    const TrainerConfig& t = job.config.trainer;
    metrics_ = std::make_unique<MetricsLog>(
        t.log.metrics, t.log.csv,
        t.load.empty() ? std::nullopt : std::optional<int64_t>(job.engine->global_steps()));
    if (!t.log.tensorboard.empty())
      tensorboard_ = std::make_unique<tensorboard::TensorBoardWriter>(t.log.tensorboard);
  }

  void message(const std::string& text) {
    if (leader_) progress_.message(text);
  }

  void step(const StepResult& s) {
    smoothed_seconds_ = smoothed_seconds_ == 0 ? s.seconds
                                               : kSpeedSmoothing * smoothed_seconds_ +
                                                     (1 - kSpeedSmoothing) * s.seconds;
    const engine::PipelineEngine& engine = *job_.engine;
    const std::vector<device::MemoryUse> memory =
        reports_memory_ ? gather_memory(engine) : std::vector<device::MemoryUse>{};
    // Optimizer state appears at the first step taken and keeps its size: gathered once.
    if (optimizer_state_summary(optimizer_bytes_).empty())
      optimizer_bytes_ = gather_optimizer_state_bytes(*job_.engine);
    std::optional<ExpertStatistics> experts;
    if (experts_ > 0) experts = gather_expert_statistics(engine, experts_, s.all_to_all_bytes);
    if (!leader_) return;
    const bool fp16 = job_.config.engine.precision.dtype == optim::Precision::kFp16;
    const double samples = static_cast<double>(job_.config.engine.train_batch_size);
    const double tokens = samples * static_cast<double>(job_.model.tokens_per_sample());
    const int devices = job_.grid->world_size();
    const double mfu =
        model_flop_utilisation(flops_per_step_, smoothed_seconds_, devices, peak_flops_);
    char mfu_text[32] = "";
    if (mfu > 0) std::snprintf(mfu_text, sizeof mfu_text, " MFU %.1f%%", 100 * mfu);
    progress_.update(
        s.step, s.loss, engine.last_learning_rate(), samples / smoothed_seconds_,
        tokens / smoothed_seconds_, smoothed_seconds_,
        grad_norm_summary(engine.last_grad_norm()) + mfu_text +
            (fp16 ? " scale " + std::to_string(static_cast<int64_t>(engine.loss_scale())) +
                        " skipped " + std::to_string(engine.skipped_steps())
                  : std::string()) +
            (experts ? experts->summary() : std::string()) + objective_summary(s.objective) +
            optimizer_state_summary(optimizer_bytes_) + memory_summary(memory));
    if (s.validation_loss) {
      progress_.message("step " + std::to_string(s.step) + " validation loss " +
                        std::to_string(*s.validation_loss));
    }
    if (s.save_stall_seconds) {
      char text[160];
      std::snprintf(text, sizeof text,
                    "step %lld checkpoint staged in %.3f s, writing in the background",
                    static_cast<long long>(s.step), *s.save_stall_seconds);
      progress_.message(text);
    }
    nlohmann::json record = {
        {"step", s.step},
        {"loss", s.loss},
        {"lr", engine.last_learning_rate()},
        {"grad_norm", engine.last_grad_norm()},
        {"loss_scale", fp16 ? nlohmann::json(engine.loss_scale()) : nlohmann::json(nullptr)},
        {"skipped_steps", engine.skipped_steps()},
        {"samples_per_s", samples / s.seconds},
        {"tokens_per_s", tokens / s.seconds},
        {"timings_ms", s.timings_ms}};
    if (s.validation_loss) record["val_loss"] = *s.validation_loss;
    if (s.save_stall_seconds) record["save_stall_s"] = *s.save_stall_seconds;
    if (s.save_seconds) record["save_s"] = *s.save_seconds;
    const double step_mfu =
        model_flop_utilisation(flops_per_step_, s.seconds, devices, peak_flops_);
    if (step_mfu > 0) record["mfu"] = step_mfu;
    if (experts) record["moe"] = experts->to_json();
    for (const auto& [name, value] : s.objective) record[name] = value;
    record["optimizer_state_bytes"] = optimizer_bytes_;  // per rank, in rank order
    if (!memory.empty()) {                               // per rank, in rank order
      const std::string device = on_gpus_ ? "gpu" : "cpu";
      nlohmann::json& now = record[device + "_memory_bytes"] = nlohmann::json::array();
      nlohmann::json& peak = record[device + "_peak_memory_bytes"] = nlohmann::json::array();
      for (const auto& m : memory) {
        now.push_back(m.allocated);
        peak.push_back(m.peak_allocated);
      }
    }
    metrics_->write(record);
    if (tensorboard_) write_scalars(s, samples, tokens, step_mfu);
  }

  void finish(double first_validation, double last_validation) {
    if (!leader_) return;
    progress_.finish();
    std::printf("validation loss: %.4f before, %.4f after %lld steps", first_validation,
                last_validation, static_cast<long long>(job_.engine->global_steps()));
    const auto* tokens = job_.model.tokens();
    if (tokens && job_.config.objective.type == ObjectiveType::kLanguageModel) {
      std::printf(" (uniform over %lld tokens: %.4f)", static_cast<long long>(tokens->vocab_size),
                  std::log(static_cast<double>(tokens->vocab_size)));
    }
    std::printf("\n");
  }

 private:
  void write_scalars(const StepResult& s, double samples, double tokens, double mfu) {
    const engine::PipelineEngine& engine = *job_.engine;
    std::map<std::string, double> scalars = {{"train/loss", s.loss},
                                             {"train/loss_scale", engine.loss_scale()},
                                             {"train/lr", engine.last_learning_rate()},
                                             {"train/grad_norm", engine.last_grad_norm()},
                                             {"train/samples_per_s", samples / s.seconds},
                                             {"train/tokens_per_s", tokens / s.seconds}};
    if (mfu > 0) scalars["train/mfu"] = mfu;
    for (const auto& [name, value] : s.objective) scalars["train/" + name] = value;
    if (s.validation_loss) scalars["val/loss"] = *s.validation_loss;
    tensorboard_->add_scalars(s.step, scalars);
  }

  const Job& job_;
  bool leader_;
  bool on_gpus_;           // some rank computes on a GPU
  bool reports_memory_;    // GPU memory, or CPU memory counted for memory_breakdown
  int64_t experts_;        // of the model's MoE layers; 0: a dense model
  double flops_per_step_;  // the model's, forward and backward of the global batch; 0: unknown
  double peak_flops_;      // per rank; 0: unknown (no MFU)
  ProgressLine progress_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<tensorboard::TensorBoardWriter> tensorboard_;
  std::vector<int64_t> optimizer_bytes_;  // per rank, once state exists
  double smoothed_seconds_ = 0;
};

// A run that does not resume from its save folder would start over there, moving `latest`
// back below another run's checkpoints: refused unless asked (overwrite).
void check_not_another_run(const TrainerConfig& t) {
  std::error_code error;
  const fs::path latest = fs::path(t.save) / "latest";
  if (t.overwrite || !fs::exists(latest, error)) return;
  if (!t.load.empty() && fs::equivalent(t.load, t.save, error)) return;
  std::string tag = io::read_file(latest.string());
  while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.back()))) tag.pop_back();
  throw io::InputError("save " + t.save + " holds another run's checkpoints (latest " + tag +
                       "): resume it with --load " + t.save + ", or start over with --overwrite");
}

// Rank 0 claims the save folder for the whole run (see FolderLock); every rank learns when
// another job holds it, so all end with the same one-line error. Collective.
std::unique_ptr<io::FolderLock> claim_save_folder(const Job& job) {
  const std::string& save = job.config.trainer.save;
  if (save.empty()) return nullptr;
  std::unique_ptr<io::FolderLock> claim;
  std::string problem;
  if (job.grid->global_rank() == 0) {
    try {
      claim = std::make_unique<io::FolderLock>(save);
      check_not_another_run(job.config.trainer);
    } catch (const io::InputError& e) {
      problem = e.what();
    }
  }
  for (const auto& found : comm::all_gather_text(*job.grid->world_comm(), problem)) {
    if (!found.empty()) throw io::InputError(found);
  }
  return claim;
}

// Rank 0: what the job is, and its effective config beside the checkpoints.
void announce(const Job& job) {
  const std::string devices = describe_devices(*job.engine);  // collective
  if (job.grid->global_rank() != 0) return;
  const topology::Grid& grid = *job.grid;
  // Every key with its value: in a file beside the checkpoints where there is one (the job
  // line sums it up), else here.
  const std::string& save = job.config.trainer.save;
  if (save.empty()) {
    std::printf("effective config: %s\n", job.effective.dump().c_str());
  } else {
    std::printf("effective config: %s\n", (fs::path(save) / "config.json").c_str());
  }
  const engine::TrainingConfig& e = job.config.engine;
  std::string schedule = config::name_of(schedule::schedule_names(), e.pipeline.schedule.kind);
  if (job.config.layout.chunks > 1) schedule += " x" + std::to_string(job.config.layout.chunks);
  if (e.zero.stage > 0) schedule += "; ZeRO " + std::to_string(e.zero.stage);
  std::printf(
      "job: %d ranks = pipe %d x data %d%s x model %d%s; model %s, %d layers; schedule %s; batch "
      "%lld = micro %lld x %lld micro-batches x data %d; %s\n",
      grid.world_size(), grid.pipe_parallel_size(), grid.data_parallel_size(),
      grid.context_parallel_size() > 1
          ? (" x context " + std::to_string(grid.context_parallel_size())).c_str()
          : "",
      grid.tensor_parallel_size(),
      job.config.layout.sequence_parallel ? " (sequence parallel)" : "",
      models::type_name(job.config.model).c_str(), job.module->num_layers(), schedule.c_str(),
      static_cast<long long>(e.train_batch_size),
      static_cast<long long>(e.train_micro_batch_size_per_gpu),
      static_cast<long long>(e.gradient_accumulation_steps), grid.data_parallel_size(),
      devices.c_str());
  if (!job.data_summary.empty()) std::printf("%s\n", job.data_summary.c_str());
  if (!job.lora_summary.empty()) std::printf("%s\n", job.lora_summary.c_str());
  make_output_folders(job.config.trainer);
  if (!save.empty()) {
    make_folder("save", save);
    io::write_file_atomically(fs::path(save) / "config.json", job.effective.dump(2) + "\n");
    // A fine-tune keeps its model's tokenizer and generation files beside its checkpoints.
    const std::string& tokenizer = job.config.trainer.sample.tokenizer;
    if (!tokenizer.empty()) copy_model_files(fs::absolute(tokenizer).parent_path(), save);
  }
}

// One optimizer step, traced when it is the step the config asks for.
StepResult train_step(Job& job, RunLog& log) {
  engine::PipelineEngine& engine = *job.engine;
  const TrainerConfig& t = job.config.trainer;
  const int64_t trace_step = t.trace_step > 0 ? t.trace_step : t.train_iters;
  const bool trace = !t.trace.empty() && engine.global_steps() + 1 == trace_step;
  if (trace) engine.record_next_batch();
  const engine::InstructionTimers timers_before = engine.timers();
  const int64_t exchanged_before = expert_parallel::bytes_sent();
  const auto start = Clock::now();
  StepResult result;
  const io::Activity training("training step " + std::to_string(engine.global_steps() + 1));
  ObjectiveStatistics* statistics = job.objective_statistics.get();
  if (statistics) statistics->clear();  // what evaluation added
  result.loss = engine.train_batch(job.train_data.get());
  if (statistics)
    result.objective =
        statistics->take(*job.grid->world_comm(), job.grid->tensor_parallel_id() == 0);
  if (trace) {
    write_trace(t.trace, engine, engine.take_records());
    log.message("wrote the trace of step " + std::to_string(trace_step) + " to " + t.trace);
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.all_to_all_bytes = expert_parallel::bytes_sent() - exchanged_before;
  result.step = engine.global_steps();
  result.timings_ms = timings_since(timers_before, engine.timers());
  return result;
}

// The tokenizer of the sample a language model ends with: on text data (bytes) or with
// sample.tokenizer; null for no sample. Made before training, so a bad file fails first.
std::unique_ptr<data::Tokenizer> sample_tokenizer(const Job& job) {
  const TrainerConfig& t = job.config.trainer;
  const auto* tokens = job.model.tokens();
  if (!tokens || t.sample.tokens <= 0) return nullptr;
  if (t.data.type != DataKind::kText && t.sample.tokenizer.empty()) return nullptr;
  return data::make_tokenizer(t.sample.tokenizer, tokens->vocab_size);
}

void sample_at_end(Job& job, const data::Tokenizer& tokenizer) {
  const TrainerConfig& t = job.config.trainer;
  const auto text =
      sample_tokens(*job.engine, tokenizer.encode(t.sample.prompt), t.sample.tokens,
                    {.temperature = t.sample.temperature,
                     .top_k = t.sample.top_k,
                     .seed = static_cast<uint64_t>(job.config.engine.seed),
                     .kv_cache = true},  // the built-in language models read the cache
                    job.model.tokens()->context);
  if (job.grid->global_rank() == 0) std::printf("sample: %s\n", tokenizer.decode(text).c_str());
}

}  // namespace

int train(const nlohmann::json& config_file) {
  check_lora_section(config_file);
  nlohmann::json config = config_file;
  const std::string resume = resolve_resume(config);
  const std::string batch = keep_global_batch(config, comm::MpiCommunicator::world()->size());
  bool model_taken = false;
  Job job = build_job(with_model_of_checkpoint(config, &model_taken));
  if (!job.train_data)  // rollouts a program feeds (the Python door) have no file
    throw io::InputError(
        "objective.rollouts: pipetrain train reads rollouts from data.paths with this file of "
        "their advantages and log-probabilities (a program feeds them from Python instead)");
  engine::PipelineEngine& engine = *job.engine;
  const TrainerConfig& t = job.config.trainer;
  const std::unique_ptr<data::Tokenizer> tokenizer = sample_tokenizer(job);
  if (!t.load.empty()) {
    const io::Activity loading("loading checkpoint " + t.load);
    checkpoint::load_checkpoint(engine, t.load, "latest", job.train_data.get());
  }
  const auto claim = claim_save_folder(job);  // after every input check: nothing written before
  if (job.grid->global_rank() == 0) {
    if (!resume.empty()) std::printf("%s\n", resume.c_str());
    if (!batch.empty())
      std::printf("%s (gradient_accumulation_steps %lld)\n", batch.c_str(),
                  static_cast<long long>(job.config.engine.gradient_accumulation_steps));
  }
  if (!t.load.empty() && job.grid->global_rank() == 0) {
    if (model_taken)
      std::printf("model: the checkpoint's (%s, %d layers), the config has no model section\n",
                  models::type_name(job.config.model).c_str(), job.module->num_layers());
    if (engine.global_steps() == 0)  // an import, or another run's start
      std::printf("fine-tuning from %s/%s\n", t.load.c_str(),
                  checkpoint::resolve_tag(t.load, "latest").c_str());
    else
      std::printf("resumed from %s at step %lld\n", t.load.c_str(),
                  static_cast<long long>(engine.global_steps()));
  }
  announce(job);
  RunLog log(job);
  const double first_validation = validation_loss(job);
  log.message("validation loss before training: " + std::to_string(first_validation));
  double last_validation = first_validation;
  const nlohmann::json client_state = {{"config", job.effective},
                                       {"started_from", started_from(t.load, t.save)}};
  std::optional<checkpoint::BackgroundSave> background;
  if (t.async_save && !t.save.empty()) background.emplace(engine, t.save);
  // A background save in flight published: said once it is.
  auto published = [&](const std::string& tag) {
    if (!tag.empty()) log.message("saved " + t.save + "/" + tag + " (written in the background)");
  };
  auto tag_of = [](int64_t step) { return "step_" + std::to_string(step); };
  auto save = [&](int64_t step) {
    const std::string tag = tag_of(step);
    const io::Activity saving("saving checkpoint " + t.save + "/" + tag);
    checkpoint::save_checkpoint(engine, t.save, tag, client_state, job.train_data.get());
    return tag;
  };
  const comm::DeferredStop stop(t.save.empty() ? 0 : t.save_on_signal);
  while (engine.global_steps() < t.train_iters) {
    StepResult step = train_step(job, log);
    if (background) published(background->poll());
    if (due(step.step, t.eval_interval, t.train_iters))
      step.validation_loss = last_validation = validation_loss(job);
    const bool saves = !t.save.empty() && due(step.step, t.save_interval, t.train_iters);
    std::string saved;  // the tag this step saved, if any
    // The last step's save is written at once; a stop finishes the one in flight.
    if (saves && background && step.step < t.train_iters) {
      const io::Activity saving("staging checkpoint " + t.save + "/" + tag_of(step.step));
      step.save_stall_seconds =
          background->start(tag_of(step.step), client_state, job.train_data.get());
    } else if (saves) {
      const auto begin = std::chrono::steady_clock::now();
      if (background) published(background->finish());
      saved = save(step.step);
      step.save_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    }
    log.step(step);
    if (!saved.empty()) log.message("saved " + t.save + "/" + saved);
    if (step.step < t.train_iters && stop.requested(*job.grid->world_comm())) {
      // The save in flight finished (this step's, when it started one), else one now.
      if (background) {
        const std::string finished = background->finish();
        published(finished);
        if (finished == tag_of(step.step)) saved = finished;
      }
      const std::string tag = saved.empty() ? save(step.step) : saved;
      // The launcher passes SIGTERM, SIGINT and SIGHUP on alike, and says which it was.
      const std::string relayed = io::stop_request();
      const std::string signal = relayed.empty() ? launch::signal_name(stop.signal()) : relayed;
      if (job.grid->global_rank() == 0)
        std::fprintf(stderr,
                     "pipetrain: stopped on %s after step %lld: saved %s/%s; run the same command "
                     "to resume (exit %d)\n",
                     signal.c_str(), static_cast<long long>(step.step), t.save.c_str(), tag.c_str(),
                     kSavedOnSignalExitCode);
      return kSavedOnSignalExitCode;
    }
  }
  log.finish(first_validation, last_validation);
  if (tokenizer) sample_at_end(job, *tokenizer);
  return 0;
}

int evaluate_checkpoint(const std::string& checkpoint, std::optional<int64_t> eval_iters) {
  const int ranks = comm::MpiCommunicator::world()->size();
  nlohmann::json config =
      config_of_checkpoint(checkpoint, kEvalMicroBatch, forward_layout(ranks, 1));
  // The validation set training read: eval_iters batches of its batch size (the training's
  // eval_iters unless given), in micro-batches of its size (see data::SampleShare).
  const JobConfig trained = parse_job_config(saved_config(checkpoint), nullptr);
  const auto& keys = job_keys();
  const int64_t micro = trained.engine.train_micro_batch_size_per_gpu;
  keys.set(config, "train_micro_batch_size_per_gpu", micro);
  keys.set(config, "gradient_accumulation_steps",
           std::max<int64_t>(1, trained.engine.train_batch_size / micro));
  if (!eval_iters) eval_iters = trained.trainer.eval_iters;
  keys.set(config, "eval_iters", *eval_iters);
  Job job = build_job(config, checkpoint);
  if (!job.validation_data)  // rollouts a program fed (the Python door)
    throw io::InputError(checkpoint +
                         ": its objective trained on rollouts a program fed: there is no "
                         "validation data to evaluate");
  checkpoint::load_checkpoint(*job.engine, checkpoint, "latest");
  const double loss = validation_loss(job);
  if (job.grid->global_rank() == 0) {
    std::printf("validation loss %.4f over %lld batches (step %lld)\n", loss,
                static_cast<long long>(*eval_iters),
                static_cast<long long>(job.engine->global_steps()));
  }
  return 0;
}

}  // namespace pipetrain::trainer
