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
  // Model chunks per stage (virtual stages): at least 2 with kInterleaved, 2 with the V
  // kinds, what the file gives with kFile, else 1.
  int64_t chunks = 1;
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

// pipeline.schedule, pipeline.chunks, pipeline.schedule_file and pipeline.max_live, bound
// onto a ScheduleConfig (engine::training_keys takes them in).
const config::KeyTable<ScheduleConfig>& schedule_keys();

// Refuses (io::InputError, naming the key) a schedule that cannot run over `stages`
// pipeline stages: chunks its kind does not take, chunks over one stage, a schedule file
// without the `file` kind or the other way round, a file of another shape, or one that does
// not plan (within max_live).
void check_schedule(const ScheduleConfig& schedule, int64_t stages);

}  // namespace pipetrain::schedule
