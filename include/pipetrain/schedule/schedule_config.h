#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "pipetrain/config/key_table.h"
#include "pipetrain/schedule/schedule.h"
#include "pipetrain/schedule/schedule_file.h"

namespace pipetrain::schedule {

// pipeline.schedule's spellings of the training schedules: every config name of the
// registry's rows (schedule_kinds()).
const config::Names<Kind>& schedule_names();

// Which schedule trains, and the knobs of its shape: the `pipeline` section's schedule keys.
struct ScheduleConfig {
  Kind kind = Kind::k1F1B;
  // With kFile: the file, and its compute orders, read and parsed when the key is read.
  std::string file_path;
  std::shared_ptr<const FileSchedule> file;
  // Most micro-batches any stage may keep live (forwarded, not yet back-propagated); 0: no
  // bound. A schedule that plans more is refused before training starts.
  int64_t max_live = 0;

  // Where the chunks sit: the kind's placement, or the file's.
  Placement placement() const {
    return file && kind == Kind::kFile ? file->shape.placement : schedule_kind(kind).placement;
  }
};

// pipeline.schedule, pipeline.schedule_file and pipeline.max_live, bound onto a
// ScheduleConfig (engine::training_keys takes them in). The chunks per stage are the
// layout's (topology::layout_keys, pipeline.chunks).
const config::KeyTable<ScheduleConfig>& schedule_keys();

// Refuses (io::InputError, naming the key) a schedule that cannot run over `stages`
// pipeline stages of `chunks` model chunks each: chunks its kind does not take, chunks over
// one stage, a schedule file without the `file` kind or the other way round, a file of
// another shape, or one that does not plan (within max_live).
void check_schedule(const ScheduleConfig& schedule, int64_t stages, int64_t chunks);

}  // namespace pipetrain::schedule
