#include <memory>
#include <string>

#include "pipetrain/config/json_value.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/schedule/schedule_config.h"

namespace pipetrain::schedule {
namespace {

// Chunks go with the schedules that run several per stage (the kinds table says how many),
// which need a pipe to spread them over.
void check_chunks(const ScheduleConfig& s, int64_t stages, int64_t count) {
  const ScheduleKind& kind = schedule_kind(s.kind);
  const std::string named =
      "pipeline.schedule \"" + config::name_of(schedule_names(), s.kind) + "\"";
  const std::string chunks = std::to_string(count);
  if (!kind.uses_chunks) {
    if (count == 1) return;
    std::string chunked;
    for (const auto& other : schedule_kinds()) {
      if (other.chunked_in_config())
        chunked += (chunked.empty() ? "" : ", ") + std::string(other.config_names.front());
    }
    throw io::InputError("pipeline.chunks " + chunks + " needs a schedule with model chunks (" +
                         chunked + "), not " + named);
  }
  if (count > 1 && stages < 2) {
    throw io::InputError(named + " over " + chunks +
                         " chunks needs pipeline.stages of at least 2, got " +
                         std::to_string(stages));
  }
  if (s.kind == Kind::kFile) return;  // the file's (check_schedule_file)
  const int least = kind.least_config_chunks();
  if (count < least || (kind.max_chunks > 0 && count > kind.max_chunks)) {
    throw io::InputError(named + " needs pipeline.chunks " +
                         (kind.max_chunks == least ? "of " : "of at least ") +
                         std::to_string(least) + ", got " + chunks);
  }
}

// A schedule file goes with pipeline.schedule "file", and gives the stages and chunks.
void check_schedule_file(const ScheduleConfig& s, int64_t stages, int64_t chunks) {
  const bool file_kind = s.kind == Kind::kFile;
  if (file_kind != static_cast<bool>(s.file)) {
    throw io::InputError(file_kind ? "pipeline.schedule \"file\" needs pipeline.schedule_file"
                                   : "pipeline.schedule_file needs pipeline.schedule \"file\"");
  }
  if (!file_kind) return;
  const PipeShape& shape = s.file->shape;
  if (shape.stages != stages || shape.chunks != chunks) {
    throw io::InputError(s.file_path + " has " + std::to_string(shape.stages) + " ranks of " +
                         std::to_string(shape.chunks) + " chunk(s), but pipeline.stages is " +
                         std::to_string(stages) + " and pipeline.chunks " + std::to_string(chunks));
  }
  plan_schedule_file(*s.file, static_cast<int>(s.max_live));  // refused if bad
}

}  // namespace

const config::Names<Kind>& schedule_names() {
  static const config::Names<Kind> names = [] {
    config::Names<Kind> made;
    for (const auto& kind : schedule_kinds()) {
      for (const auto name : kind.config_names) made.push_back({std::string(name), kind.kind});
    }
    return made;
  }();
  return names;
}

const config::KeyTable<ScheduleConfig>& schedule_keys() {
  static const config::KeyTable<ScheduleConfig> table = [] {
    config::KeyTable<ScheduleConfig> t;
    t.choice("pipeline.schedule", PIPETRAIN_FIELD(kind), schedule_names(),
             "the training schedule: DeepSpeed's 1F1B (`train` is its DeepSpeed name), GPipe, "
             "Megatron's interleaved 1F1B over `pipeline.chunks`, zero-bubble ZB-H1 or ZB-H2 "
             "(weight gradients deferred into the bubbles), PyTorch's interleaved zero bubble "
             "and looped BFS over `pipeline.chunks`, or the V schedules ZBV and DualPipeV (two "
             "chunks per stage in a V: `pipeline.chunks` 2), or `file` "
             "(`pipeline.schedule_file`)")
        .custom(
            "pipeline.schedule_file", "string",
            "with `pipeline.schedule` \"file\": each rank's compute order in PyTorch "
            "pipelining's CSV layout (a row per rank, cells such as `0F3`, `3I1`, `3W1` or "
            "`(0F3;3B1)OVERLAP_F_B`), or a `.json` file as `pipetrain schedule --format json` "
            "writes it; lowered, validated and simulated before any rank starts",
            [](const std::string& key, const nlohmann::json& v, ScheduleConfig& c) {
              c.file_path = config::read_string(key, v);
              c.file = std::make_shared<const FileSchedule>(read_schedule_file(c.file_path));
            },
            [](const ScheduleConfig& c) -> nlohmann::json {
              if (c.file_path.empty()) return nullptr;
              return c.file_path;
            })
        .integer("pipeline.max_live", PIPETRAIN_FIELD(max_live),
                 "most micro-batches a stage may keep live (forwarded, not yet "
                 "back-propagated); a schedule planning more is refused; 0: no bound",
                 config::within(0, 1 << 30));
    return t;
  }();
  return table;
}

void check_schedule(const ScheduleConfig& schedule, int64_t stages, int64_t chunks) {
  check_chunks(schedule, stages, chunks);
  check_schedule_file(schedule, stages, chunks);
}

}  // namespace pipetrain::schedule
