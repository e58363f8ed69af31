#include "pipetrain/schedule/schedule_file.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "io/read_file.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/schedule/validator.h"
#include "schedule/render.h"

namespace pipetrain::schedule {
namespace {

constexpr std::uintmax_t kMaxFileBytes = 64u << 20;

// A cell's action before the file's shape is known.
struct Cell {
  int rank = 0;
  int column = 0;
  std::string text;
  int stage = 0;  // global (virtual) stage index
  OpKind kind{};
  int micro_batch = 0;
  bool paired = false;
};

std::string trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return std::string(text.substr(first, last - first + 1));
}

[[noreturn]] void refuse(const std::string& path, int rank, int column, const std::string& text,
                         const std::string& why) {
  throw io::InputError(path + ": rank " + std::to_string(rank) + ", cell " +
                       std::to_string(column + 1) + " (`" + text + "`): " + why);
}

OpKind kind_of_letter(char letter) {
  switch (letter) {
    case 'F':
      return OpKind::kForwardPass;
    case 'B':
      return OpKind::kBackwardPass;
    case 'I':
      return OpKind::kBackwardInput;
    default:
      return OpKind::kBackwardWeight;
  }
}

// The cell's actions (two for an overlapped pair).
std::vector<Cell> parse_cell(const std::string& path, int rank, int column,
                             const std::string& text) {
  static const std::regex action(R"(^(\d{1,6})([FBIW])(\d{1,6})$)");
  static const std::regex pair(R"(^\(([^;()]+);([^;()]+)\)OVERLAP_F_B$)");
  // The longest action, (999999F999999;999999B999999)OVERLAP_F_B, has 41 characters; longer
  // cells are refused before a regex (whose matcher recurses per character) sees them.
  constexpr std::size_t kLongestCell = 48;
  if (text.size() > kLongestCell) {
    refuse(path, rank, column, text.substr(0, 20) + "...",
           "not a compute action (" + std::to_string(text.size()) + " characters)");
  }
  std::smatch m;
  if (std::regex_match(text, m, pair)) {
    std::vector<Cell> cells = parse_cell(path, rank, column, trimmed(m.str(1)));
    std::vector<Cell> second = parse_cell(path, rank, column, trimmed(m.str(2)));
    if (cells.size() != 1 || second.size() != 1 || cells[0].kind != OpKind::kForwardPass ||
        second[0].kind == OpKind::kForwardPass) {
      refuse(path, rank, column, text, "an overlapped pair is a forward and then a backward");
    }
    second[0].paired = true;
    cells.push_back(second[0]);
    for (Cell& cell : cells) cell.text = text;
    return cells;
  }
  if (!std::regex_match(text, m, action)) {
    refuse(path, rank, column, text,
           "not a compute action ({stage}{F|B|I|W}{micro-batch}, e.g. 0F3, or "
           "(0F3;3B1)OVERLAP_F_B); communication actions are added by pipetrain");
  }
  return {Cell{rank, column, text, std::stoi(m.str(1)), kind_of_letter(m.str(2)[0]),
               std::stoi(m.str(3))}};
}

std::string stage_list(const std::vector<int>& stages) {
  std::string text;
  for (int s : stages) text += (text.empty() ? "" : ", ") + std::to_string(s);
  return text;
}

// The chunks and placement the ranks' stage indices show.
PipeShape shape_of(const std::string& path, const std::vector<std::set<int>>& held) {
  const int p = static_cast<int>(held.size());
  const int chunks = static_cast<int>(held[0].size());
  PipeShape shape{1, p, chunks};
  for (int r = 0; r < p; ++r) {
    const std::vector<int> have(held[r].begin(), held[r].end());
    if (have.empty()) throw io::InputError(path + ": rank " + std::to_string(r) + " runs nothing");
    if (static_cast<int>(have.size()) != chunks) {
      throw io::InputError(path + ": rank " + std::to_string(r) + " runs stages " +
                           stage_list(have) + " but rank 0 runs " + std::to_string(chunks) +
                           " stage(s): every rank holds as many");
    }
  }
  for (Placement placement : {Placement::kLoop, Placement::kV}) {
    shape.placement = placement;
    bool fits = true;
    for (int r = 0; r < p && fits; ++r) {
      std::set<int> expected;
      for (int c = 0; c < chunks; ++c) expected.insert(shape.virtual_stage(r, c));
      fits = expected == held[r];
    }
    if (fits) return shape;
  }
  for (int r = 0; r < p; ++r) {
    std::vector<int> loop, v;
    for (int c = 0; c < chunks; ++c) {
      loop.push_back(PipeShape{1, p, chunks, Placement::kLoop}.virtual_stage(r, c));
      v.push_back(PipeShape{1, p, chunks, Placement::kV}.virtual_stage(r, c));
    }
    std::sort(v.begin(), v.end());
    const std::vector<int> have(held[r].begin(), held[r].end());
    if (have != loop && have != v) {
      throw io::InputError(path + ": rank " + std::to_string(r) + " runs stages " +
                           stage_list(have) + ", which neither loop (" + stage_list(loop) +
                           ") nor form a V (" + stage_list(v) + ")");
    }
  }
  throw io::InputError(path + ": the ranks' stages mix loops and Vs");
}

}  // namespace

FileSchedule parse_schedule_csv(std::string_view text, const std::string& path) {
  std::vector<std::vector<Cell>> rows;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    if (trimmed(line).empty()) continue;
    const int rank = static_cast<int>(rows.size());
    std::vector<Cell>& row = rows.emplace_back();
    std::istringstream cells(line);
    std::string cell;
    for (int column = 0; std::getline(cells, cell, ','); ++column) {
      const std::string action = trimmed(cell);
      if (action.empty()) continue;  // an idle slot
      for (Cell& c : parse_cell(path, rank, column, action)) row.push_back(std::move(c));
    }
  }
  if (rows.empty()) throw io::InputError(path + ": no ranks (one row per rank)");
  const int p = static_cast<int>(rows.size());
  std::vector<std::set<int>> held(p);
  int micro_batches = 0;
  for (const auto& row : rows) {
    for (const Cell& c : row) {
      held[c.rank].insert(c.stage);
      micro_batches = std::max(micro_batches, c.micro_batch + 1);
    }
  }
  FileSchedule file{path, shape_of(path, held), {}};
  file.shape.micro_batches = micro_batches;
  for (const auto& row : rows) {
    ComputeOrder& order = file.orders.emplace_back();
    for (const Cell& c : row)
      order.push_back({c.kind, c.micro_batch, file.shape.chunk_of(c.stage), c.paired});
  }
  return file;
}

FileSchedule parse_schedule_json(std::string_view text, const std::string& path) {
  // The plan's form nests four deep; anything deeper is refused while parsing, before a
  // deep value could be built (or destroyed, or printed) recursively.
  constexpr int kDeepest = 6;
  const nlohmann::json::parser_callback_t shallow = [&](int depth, nlohmann::json::parse_event_t,
                                                        nlohmann::json&) {
    if (depth > kDeepest)
      throw io::InputError(path + ": nested deeper than the plan's form (" +
                           std::to_string(kDeepest) + " levels)");
    return true;
  };
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(text, shallow);
  } catch (const nlohmann::json::exception& e) {
    throw io::InputError(path + ": not JSON (" + e.what() + ")");
  }
  if (!object.is_object()) throw io::InputError(path + ": the top level must be an object");
  // Integers read as 64 bits (no wrap into range), then bounded.
  auto in_range = [](const nlohmann::json& value, int64_t least, int64_t most) {
    return (value.is_number_integer() && !value.is_number_unsigned() &&
            value.get<int64_t>() >= least && value.get<int64_t>() <= most) ||
           (value.is_number_unsigned() && least <= 0 && value.get<uint64_t>() <= uint64_t(most)) ||
           (value.is_number_unsigned() && least > 0 && value.get<uint64_t>() >= uint64_t(least) &&
            value.get<uint64_t>() <= uint64_t(most));
  };
  auto integer = [&](const char* key, int least, int most) {
    if (!object.contains(key) || !in_range(object[key], least, most))
      throw io::InputError(path + ": \"" + key + "\" must be an integer in " +
                           std::to_string(least) + ".." + std::to_string(most));
    return object[key].get<int>();
  };
  constexpr int kMost = 1 << 20;
  FileSchedule file{path, {}, {}};
  file.shape.micro_batches = integer("micro_batches", 1, kMost);
  file.shape.stages = integer("stages", 1, 4096);
  file.shape.chunks = integer("chunks", 1, 64);
  const auto placement = object.find("placement");
  const bool v = placement != object.end() && *placement == "v";
  if (placement != object.end() && !v && *placement != "loop")
    throw io::InputError(path + ": \"placement\" must be \"loop\" or \"v\"");
  file.shape.placement = v ? Placement::kV : Placement::kLoop;
  const auto found = object.find("steps");
  if (found == object.end() || !found->is_array() ||
      static_cast<int>(found->size()) != file.shape.stages)
    throw io::InputError(path + ": \"steps\" must list the steps of each of the " +
                         std::to_string(file.shape.stages) + " stages");
  const nlohmann::json& stages = *found;
  for (int r = 0; r < file.shape.stages; ++r) {
    ComputeOrder& order = file.orders.emplace_back();
    const auto where = [&](std::size_t t) {
      return path + ": stage " + std::to_string(r) + ", step " + std::to_string(t) + ": ";
    };
    if (!stages[r].is_array()) throw io::InputError(where(0) + "the steps must be a list");
    for (std::size_t t = 0; t < stages[r].size(); ++t) {
      const auto& step = stages[r][t];
      if (!step.is_array()) throw io::InputError(where(t) + "a step must be a list");
      const std::size_t before = order.size();
      for (const auto& entry : step) {
        if (!entry.is_array() || entry.empty() || !entry[0].is_string())
          throw io::InputError(where(t) + "an instruction is [name, ...]");
        const std::string name = entry[0].get<std::string>();
        const auto kind = op_kind_from_name(name);
        if (!kind) throw io::InputError(where(t) + "no instruction \"" + name.substr(0, 40) + "\"");
        if (!is_compute(*kind)) continue;  // transfers and loads are made again
        if (entry.size() != 4 || !in_range(entry[2], 0, file.shape.chunks - 1) ||
            !in_range(entry[3], 0, file.shape.micro_batches - 1))
          throw io::InputError(where(t) + name +
                               ": a compute instruction is [name, buffer, chunk, micro-batch] "
                               "with the chunk and micro-batch in range");
        order.push_back({*kind, entry[3].get<int>(), entry[2].get<int>()});
      }
      // Two passes in one step: an F&B pair when a forward comes first and the backward is
      // another chunk's (DualPipeV's), else one after the other; more are refused.
      const std::size_t passes = order.size() - before;
      if (passes > 2) throw io::InputError(where(t) + "more than two compute passes in one step");
      if (passes == 2) {
        const ComputeOp& forward = order[before];
        ComputeOp& backward = order[before + 1];
        backward.paired = forward.kind == OpKind::kForwardPass &&
                          backward.kind != OpKind::kForwardPass && forward.chunk != backward.chunk;
      }
    }
  }
  return file;
}

FileSchedule read_schedule_file(const std::string& path) {
  const std::string text = io::read_file(path, kMaxFileBytes);
  std::string tail = path.size() >= 5 ? path.substr(path.size() - 5) : "";
  for (char& c : tail) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool json = tail == ".json";
  return json ? parse_schedule_json(text, path) : parse_schedule_csv(text, path);
}

namespace {

// Each pass once, in the order a micro-batch's data allows on its rank; at most
// `max_live` micro-batches live.
void check_passes(const FileSchedule& file, int max_live) {
  const PipeShape& shape = file.shape;
  const int m = shape.micro_batches;
  // Per (virtual stage, micro-batch): what ran so far on its rank. Sparse: a cell may name
  // a micro-batch far beyond the others.
  enum : int { kForward = 1, kBackward = 2, kInput = 4, kWeight = 8 };
  std::map<std::pair<int, int>, int> ran;
  std::vector<int> forwarded(shape.virtual_stages(), 0);  // next micro-batch, per stage
  for (int r = 0; r < shape.stages; ++r) {
    int live = 0;
    for (const ComputeOp& op : file.orders[r]) {
      const std::string action = action_text(shape, r, op);
      auto fail = [&](const std::string& why) {
        throw io::InputError(file.path + ": rank " + std::to_string(r) + ", action " + action +
                             ": " + why);
      };
      int& done = ran[{shape.virtual_stage(r, op.chunk), op.micro_batch}];
      switch (op.kind) {
        case OpKind::kForwardPass: {
          if (done & kForward) fail("runs twice");
          int& next = forwarded[shape.virtual_stage(r, op.chunk)];
          if (op.micro_batch != next)
            fail("forwards micro-batch " + std::to_string(op.micro_batch) + " before micro-batch " +
                 std::to_string(next) + " (inputs and labels load in order)");
          ++next;
          done |= kForward;
          if (++live > max_live && max_live > 0)
            fail(std::to_string(live) + " micro-batches live, more than pipeline.max_live " +
                 std::to_string(max_live));
          break;
        }
        case OpKind::kBackwardPass:
        case OpKind::kBackwardInput:
          if (!(done & kForward)) fail("reads an activation its forward has not written yet");
          if (done & (kBackward | kInput)) fail("a second backward of this micro-batch");
          done |= op.kind == OpKind::kBackwardPass ? kBackward : kInput;
          if (op.kind == OpKind::kBackwardPass) --live;
          break;
        default:
          if (done & kBackward) fail("a weight gradient after a full backward (B), which made it");
          if (!(done & kInput)) fail("a weight gradient before its input gradient (I)");
          if (done & kWeight) fail("runs twice");
          done |= kWeight;
          --live;
      }
    }
  }
  for (int vs = 0; vs < shape.virtual_stages(); ++vs) {
    // Forwards ran in order from 0, so a stage missing one stops this loop there.
    for (int mb = 0; mb < m; ++mb) {
      const auto found = ran.find({vs, mb});
      const int done = found == ran.end() ? 0 : found->second;
      const std::string where = file.path + ": rank " + std::to_string(shape.stage_of(vs)) +
                                ": micro-batch " + std::to_string(mb) + " never runs ";
      const std::string on = " on stage " + std::to_string(vs);
      if (!(done & kForward)) throw io::InputError(where + "forward" + on);
      if (!(done & (kBackward | kInput))) throw io::InputError(where + "backward" + on);
      if ((done & kInput) && !(done & kWeight))
        throw io::InputError(where + "its weight gradient (W)" + on);
    }
  }
}

}  // namespace

namespace {

// Gradients flow first in, first out between neighbouring stages: each stage's backwards
// must come in the order of the next stage's.
void check_backward_orders(const FileSchedule& file) {
  const PipeShape& shape = file.shape;
  std::vector<std::vector<int>> order(shape.virtual_stages());  // micro-batches, per stage
  for (int r = 0; r < shape.stages; ++r) {
    for (const ComputeOp& op : file.orders[r]) {
      if (op.kind == OpKind::kBackwardPass || op.kind == OpKind::kBackwardInput)
        order[shape.virtual_stage(r, op.chunk)].push_back(op.micro_batch);
    }
  }
  for (int vs = 0; vs + 1 < shape.virtual_stages(); ++vs) {
    if (order[vs] == order[vs + 1]) continue;
    const auto differ = std::mismatch(order[vs].begin(), order[vs].end(), order[vs + 1].begin());
    const int here = *differ.first;
    throw io::InputError(file.path + ": rank " + std::to_string(shape.stage_of(vs)) + ", stage " +
                         std::to_string(vs) + ": backward of micro-batch " + std::to_string(here) +
                         " where stage " + std::to_string(vs + 1) + " sends micro-batch " +
                         std::to_string(*differ.second) +
                         "'s gradient (a stage runs its backwards in the order of the next "
                         "stage's)");
  }
}

}  // namespace

PipelinePlan plan_schedule_file(const FileSchedule& file, int max_live) {
  try {
    check_work_bounds(file.shape);
  } catch (const io::InputError& e) {
    throw io::InputError(file.path + ": " + e.what());
  }
  check_passes(file, max_live);
  check_backward_orders(file);
  LockstepPlan built;
  try {
    built = build_lockstep(file.shape, file.orders);
  } catch (const std::logic_error& e) {
    throw io::InputError(file.path + ": " + e.what());
  }
  bool splits = false;
  for (const auto& order : file.orders) {
    for (const ComputeOp& op : order) splits = splits || op.kind == OpKind::kBackwardInput;
  }
  PipelinePlan plan{Kind::kFile,
                    file.shape,
                    true,
                    splits,
                    std::move(built.num_pipe_buffers),
                    std::move(built.stage_steps)};
  if (const auto violation = validate(plan)) {
    throw io::InputError(file.path + ": the lowered plan is invalid: " + violation->to_string());
  }
  return plan;
}

}  // namespace pipetrain::schedule
