#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pipetrain/schedule/instruction.h"

namespace pipetrain::schedule {

// How a rank's model chunks sit along the model's virtual stages.
enum class Placement : std::uint8_t {
  kLoop,  // rank s holds virtual stages s, s+P, s+2P, ... (Megatron's interleaving)
  kV,     // a zig-zag: chunk 0 is virtual stage s, chunk 1 is 2P-1-s, chunk 2 is 2P+s, ...
          // (ZBV, DualPipeV); the last rank feeds its own next chunk
};

// The size of one pipelined batch.
struct PipeShape {
  int micro_batches = 1;
  int stages = 1;
  // Model chunks per stage, placed along the virtual stages as `placement` says.
  int chunks = 1;
  Placement placement = Placement::kLoop;

  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(int stage, int chunk) const {
    const bool reversed = placement == Placement::kV && chunk % 2 == 1;
    return chunk * stages + (reversed ? stages - 1 - stage : stage);
  }
  // The rank and chunk that hold virtual stage `vs`.
  int stage_of(int vs) const {
    const int chunk = chunk_of(vs);
    const int offset = vs % stages;
    return placement == Placement::kV && chunk % 2 == 1 ? stages - 1 - offset : offset;
  }
  int chunk_of(int vs) const { return vs / stages; }
};

// Throws InputError naming the size past the bounds on the work a plan takes (micro-batches,
// stages, chunks and the steps they make); plan_pipeline and schedule files check them.
void check_work_bounds(const PipeShape& shape);
bool plannable(const PipeShape& shape);

// Throws InputError unless 0 <= stage_id < shape.stages.
void check_stage_id(const PipeShape& shape, int stage_id);

// The other end of a transfer.
struct Peer {
  int stage = 0;
  int chunk = 0;
};

// Where a send issued by `stage` goes, or where a receive issued by `stage` comes from.
// Activations flow to the next virtual stage, gradients to the previous one.
Peer transfer_peer(const PipeShape& shape, int stage, const Instruction& transfer);
// A transfer whose other end is on the same rank (a V's turn): a local hand-over between
// the rank's own chunks, never a message.
bool is_local_transfer(const PipeShape& shape, int stage, const Instruction& transfer);

// The schedules this layer plans. Names (schedule_kind(k).name) are the spec's and the
// command line's; everywhere past parsing a schedule is one of these.
enum class Kind {
  k1F1B,           // "train": DeepSpeed's synchronous 1F1B (TrainSchedule)
  kInference,      // "inference": forward only
  kDataParallel,   // "data-parallel": one stage, forward and backward per micro-batch
  kGpipe,          // "gpipe"
  kInterleaved,    // "interleaved": Megatron's interleaved 1F1B over model chunks
  kZbH1,           // "zb-h1": zero-bubble ZB-H1, backward split in two
  kZbH2,           // "zb-h2": zero-bubble ZB-H2, more warm-up forwards, no bubble
  kInterleavedZb,  // "interleaved-zb": PyTorch's ScheduleInterleavedZeroBubble
  kLoopedBfs,      // "looped-bfs": PyTorch's ScheduleLoopedBFS
  kZbv,            // "zbv": PyTorch's ScheduleZBVZeroBubble, two chunks in a V
  kDualPipeV,      // "dualpipev": DeepSeek's DualPipeV (PyTorch's ScheduleDualPipeV)
  kFile,           // "file": compute orders read from a file (schedule_file.h)
};

// The instruction stream of one stage for one batch, for the kinds written step by step
// (DeepSpeed's, deepspeed_schedules.h); the others are built from compute orders
// (compute_order.h). Pure functions of (shape, stage_id): no tensors, no communication.
class Schedule {
 public:
  Schedule(const PipeShape& shape, int stage_id);
  virtual ~Schedule() = default;

  virtual Kind kind() const = 0;
  virtual int num_pipe_buffers() const = 0;
  virtual std::vector<Step> steps() const = 0;

  const PipeShape& shape() const { return shape_; }
  int micro_batches() const { return shape_.micro_batches; }
  int stages() const { return shape_.stages; }
  int stage_id() const { return stage_id_; }
  bool is_first_stage() const { return stage_id_ == 0; }
  bool is_last_stage() const { return stage_id_ == shape_.stages - 1; }

 protected:
  bool valid_micro_batch(int micro_batch) const {
    return micro_batch >= 0 && micro_batch < shape_.micro_batches;
  }

 private:
  PipeShape shape_;
  int stage_id_;
};

struct ComputeOp;  // compute_order.h: a rank's passes are a std::vector of them

// A schedule kind's row in the registry (schedule_kinds()): its names, what it needs of
// a shape, and how its plan is made. Adding a schedule is a row here plus its order
// function; the config's parser, the planner, the CLI's help and the docs read the rows.
struct ScheduleKind {
  Kind kind;
  std::string_view name;  // in plans, traces and `pipetrain schedule`
  std::string_view summary;
  bool trains;           // ends with backward passes and an optimizer step
  bool uses_chunks;      // honours PipeShape::chunks
  bool splits_backward;  // BackwardInput + BackwardWeight (instead of, or beside, BackwardPass)
  Placement placement = Placement::kLoop;  // of the chunks, when there are several
  int min_chunks = 1;                      // and at most this many (0: no bound)
  int max_chunks = 1;
  // pipeline.schedule's spellings (the first is written back); empty: not a training
  // schedule a config names.
  std::vector<std::string_view> config_names = {};
  // The fewest chunks a config may give it (0: min_chunks); interleaved 1F1B over one
  // chunk is 1F1B, which a config names as such.
  int min_config_chunks = 0;
  // Whether `pipetrain plan` weighs it.
  bool planned = false;
  // Its compute orders, lowered by the lockstep builder; null for kinds written step by step.
  std::vector<std::vector<ComputeOp>> (*order)(const PipeShape&) = nullptr;
  // Its step-by-step form (DeepSpeed's), used where `order` is null or the shape has one chunk.
  std::unique_ptr<Schedule> (*steps)(const PipeShape&, int stage_id) = nullptr;
  // What it needs of a shape beyond the chunk counts: InputError naming the rule; or null.
  void (*shape_rule)(const PipeShape&) = nullptr;

  // Whether a config gives it pipeline.chunks (a named kind over model chunks, not a file).
  bool chunked_in_config() const {
    return uses_chunks && !config_names.empty() && kind != Kind::kFile;
  }
  // The fewest chunks a config may give it.
  int least_config_chunks() const { return min_config_chunks > 0 ? min_config_chunks : min_chunks; }
};

const std::vector<ScheduleKind>& schedule_kinds();
const ScheduleKind& schedule_kind(Kind kind);
// The kind a user named; throws InputError listing the known names if there is none.
const ScheduleKind& schedule_kind(std::string_view name);
std::string_view name(Kind kind);
// pipeline.schedule's spelling of a kind (its first config name, else its name).
std::string_view config_name(Kind kind);

// Throws InputError if `kind` cannot run `shape` (micro-batches, stages, chunks, placement
// and the kind's own rule); fits() says the same without throwing.
void check_shape(const ScheduleKind& kind, const PipeShape& shape);
bool fits(Kind kind, const PipeShape& shape);

// Every stage's schedule for one batch: what the validator and the simulator consume.
struct PipelinePlan {
  Kind kind = Kind::k1F1B;
  PipeShape shape;
  bool trains = true;
  bool splits_backward = false;
  std::vector<int> num_pipe_buffers;           // per stage
  std::vector<std::vector<Step>> stage_steps;  // per stage
};

// The shape a kind runs: its placement, and its chunks (2 for the V kinds) when `chunks` is 0.
PipeShape shape_for(Kind kind, int micro_batches, int stages, int chunks = 0);

// Throws InputError naming the bad argument (stages < 1, chunks the kind has not...).
PipelinePlan plan_pipeline(Kind kind, const PipeShape& shape);
// Most micro-batches `stage` keeps live at once in `plan`: forwarded, and not yet through
// their backward (or, split, their weight gradient). Forward-only plans keep none.
int peak_live(const PipelinePlan& plan, int stage);

// For a kind a user named (the command line's, a test's): schedule_kind(name), then plan
// with the kind's placement, and its least chunks where the shape says 1.
PipelinePlan plan_pipeline(std::string_view name, const PipeShape& shape);

}  // namespace pipetrain::schedule
