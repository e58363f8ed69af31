#include "schedule/render.h"

#include <algorithm>
#include <array>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace pipetrain::schedule {
namespace {

// DeepSpeed's forms (the spec's) have no chunk; a plan over several chunks, or of a
// training kind built for them, names each instruction's chunk.
bool shows_chunks(const PipelinePlan& plan) {
  const ScheduleKind& kind = schedule_kind(plan.kind);
  return plan.shape.chunks > 1 || (kind.uses_chunks && kind.trains);
}

constexpr std::array<std::string_view, kNumOpKinds> kAbbreviations = {
    "L", "F", "B", "Bi", "W", "sA", "rA", "sG", "rG", "TIED", "GRADS", "STEP"};

std::string cell(const Step& step, bool with_chunks) {
  std::string text;
  for (const auto& in : step) {
    if (!text.empty()) text += ' ';
    text += kAbbreviations[static_cast<int>(in.kind)];
    if (has_buffer(in.kind)) text += std::to_string(in.buffer);
    if (with_chunks && has_buffer(in.kind)) text.append(".").append(std::to_string(in.chunk));
  }
  return text.empty() ? "-" : text;
}

}  // namespace

char compute_letter(OpKind kind) {
  switch (kind) {
    case OpKind::kForwardPass:
      return 'F';
    case OpKind::kBackwardPass:
      return 'B';
    case OpKind::kBackwardInput:
      return 'I';
    case OpKind::kBackwardWeight:
      return 'W';
    default:
      throw std::logic_error(std::string(name(kind)) + " is not a compute pass");
  }
}

std::string to_json(const PipelinePlan& plan, int stage) {
  const bool with_chunks = shows_chunks(plan);
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& step : plan.stage_steps.at(stage)) {
    nlohmann::json instructions = nlohmann::json::array();
    for (const auto& in : step) {
      nlohmann::json entry = nlohmann::json::array({name(in.kind)});
      if (has_buffer(in.kind)) {
        entry.push_back(in.buffer);
        if (with_chunks) entry.push_back(in.chunk);
      }
      instructions.push_back(std::move(entry));
    }
    steps.push_back(std::move(instructions));
  }
  const nlohmann::json object = {{"num_pipe_buffers", plan.num_pipe_buffers.at(stage)},
                                 {"steps", std::move(steps)}};
  return object.dump();
}

std::string to_csv(const PipelinePlan& plan) {
  std::ostringstream out;
  for (int s = 0; s < plan.shape.stages; ++s) {
    bool first = true;
    for (const Step& step : plan.stage_steps[s]) {
      if (!first) out << ',';
      first = false;
      std::vector<std::string> actions;
      std::vector<const Instruction*> computes;
      for (const Instruction& in : step) {
        if (!is_compute(in.kind)) continue;
        computes.push_back(&in);
        actions.push_back(std::to_string(plan.shape.virtual_stage(s, in.chunk)) +
                          compute_letter(in.kind) + std::to_string(in.micro_batch));
      }
      // An F&B pair: a forward and another chunk's backward in one step (DualPipeV's);
      // other passes that share a step (data-parallel's F and B) take a cell each.
      const bool pair = computes.size() == 2 && computes[0]->kind == OpKind::kForwardPass &&
                        computes[1]->kind != OpKind::kForwardPass &&
                        computes[0]->chunk != computes[1]->chunk;
      if (pair) {
        out << '(' << actions[0] << ';' << actions[1] << ")OVERLAP_F_B";
      } else {
        for (std::size_t i = 0; i < actions.size(); ++i) out << (i ? "," : "") << actions[i];
      }
    }
    out << '\n';
  }
  return out.str();
}

std::string to_plan_json(const PipelinePlan& plan) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& steps : plan.stage_steps) {
    nlohmann::json stage = nlohmann::json::array();
    for (const auto& step : steps) {
      nlohmann::json instructions = nlohmann::json::array();
      for (const auto& in : step) {
        nlohmann::json entry = nlohmann::json::array({name(in.kind)});
        if (has_buffer(in.kind)) entry.insert(entry.end(), {in.buffer, in.chunk, in.micro_batch});
        instructions.push_back(std::move(entry));
      }
      stage.push_back(std::move(instructions));
    }
    stages.push_back(std::move(stage));
  }
  const nlohmann::json object = {
      {"schedule", name(plan.kind)},
      {"micro_batches", plan.shape.micro_batches},
      {"stages", plan.shape.stages},
      {"chunks", plan.shape.chunks},
      {"placement", plan.shape.placement == Placement::kV ? "v" : "loop"},
      {"num_pipe_buffers", plan.num_pipe_buffers},
      {"steps", std::move(stages)}};
  return object.dump();
}

std::string to_table(const PipelinePlan& plan, std::optional<int> stage) {
  const bool with_chunks = shows_chunks(plan);
  std::vector<int> stages;
  for (int s = 0; s < plan.shape.stages; ++s) {
    if (!stage || *stage == s) stages.push_back(s);
  }
  std::size_t total_steps = 0;
  for (int s : stages) total_steps = std::max(total_steps, plan.stage_steps[s].size());

  // Cells first, to size the columns.
  std::vector<std::vector<std::string>> cells(total_steps);
  std::vector<std::size_t> widths;
  for (int s : stages) widths.push_back(("stage " + std::to_string(s)).size());
  for (std::size_t t = 0; t < total_steps; ++t) {
    for (std::size_t c = 0; c < stages.size(); ++c) {
      const auto& steps = plan.stage_steps[stages[c]];
      cells[t].push_back(t < steps.size() ? cell(steps[t], with_chunks) : "-");
      widths[c] = std::max(widths[c], cells[t].back().size());
    }
  }

  std::ostringstream out;
  out << std::left << std::setw(6) << "step";
  for (std::size_t c = 0; c < stages.size(); ++c) {
    out << "  " << std::setw(static_cast<int>(widths[c])) << "stage " + std::to_string(stages[c]);
  }
  out << '\n';
  for (std::size_t t = 0; t < total_steps; ++t) {
    out << std::setw(6) << t;
    for (std::size_t c = 0; c < stages.size(); ++c) {
      out << "  " << std::setw(static_cast<int>(widths[c])) << cells[t][c];
    }
    out << '\n';
  }
  out << "buffers:";
  for (int s : stages) out << ' ' << plan.num_pipe_buffers[s];
  out << "\nlegend: L load, F forward, B backward, Bi backward-input, W weight-grad, "
         "sA/rA send/recv activation, sG/rG send/recv grad, TIED/GRADS reduce tied/data-parallel "
         "grads, STEP optimizer; the number is the buffer"
      << (with_chunks ? ", after the dot the chunk" : "") << '\n';
  return out.str();
}

std::string to_svg(const PipelinePlan& plan, const Timeline& timeline, std::string_view caption) {
  constexpr double kRowHeight = 28;
  constexpr double kLabelWidth = 70;
  constexpr double kChartWidth = 1000;
  constexpr double kTop = 30;
  const int stages = plan.shape.stages;
  const double scale = timeline.makespan > 0 ? kChartWidth / timeline.makespan : 1.0;
  const double height = kTop + stages * kRowHeight + 40;

  auto colour = [](OpKind kind) {
    switch (kind) {
      case OpKind::kForwardPass:
        return "#4e79a7";
      case OpKind::kBackwardPass:
        return "#59a14f";
      case OpKind::kBackwardInput:
        return "#8cd17d";
      default:
        return "#f28e2b";  // weight gradient
    }
  };

  std::ostringstream svg;
  svg << std::fixed << std::setprecision(2);
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kLabelWidth + kChartWidth + 20
      << "\" height=\"" << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  // Titled as configs spell it: DeepSpeed's "train" is the 1F1B.
  svg << "<text x=\"4\" y=\"18\" font-size=\"13\">"
      << (plan.kind == Kind::k1F1B ? std::string_view("1f1b") : name(plan.kind));
  if (!caption.empty()) svg << " " << caption;
  svg << ": " << plan.shape.micro_batches << " micro-batches, " << stages << " stages";
  if (plan.shape.chunks > 1) svg << ", " << plan.shape.chunks << " chunks";
  svg << ", makespan " << timeline.makespan << "</text>\n";
  for (int s = 0; s < stages; ++s) {
    const double y = kTop + s * kRowHeight;
    svg << "<text x=\"4\" y=\"" << y + kRowHeight * 0.65 << "\">stage " << s << "</text>\n";
    svg << "<rect x=\"" << kLabelWidth << "\" y=\"" << y << "\" width=\"" << kChartWidth
        << "\" height=\"" << kRowHeight - 4 << "\" fill=\"#eeeeee\"/>\n";
  }
  for (const auto& box : timeline.boxes) {
    const double x = kLabelWidth + box.start * scale;
    const double width = (box.end - box.start) * scale;
    const double y = kTop + box.stage * kRowHeight;
    svg << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << width << "\" height=\""
        << kRowHeight - 4 << "\" fill=\"" << colour(box.kind)
        << "\" stroke=\"white\" stroke-width=\"0.5\"/>\n";
    std::string label = std::to_string(box.micro_batch);
    if (plan.shape.chunks > 1) label.append(".").append(std::to_string(box.chunk));
    svg << "<text x=\"" << x + width / 2 << "\" y=\"" << y + kRowHeight * 0.6
        << "\" text-anchor=\"middle\" fill=\"white\">" << label << "</text>\n";
  }
  const double legend_y = kTop + stages * kRowHeight + 20;
  const std::array<std::pair<OpKind, const char*>, 4> legend = {
      {{OpKind::kForwardPass, "forward"},
       {OpKind::kBackwardPass, "backward"},
       {OpKind::kBackwardInput, "backward (input)"},
       {OpKind::kBackwardWeight, "weight gradient"}}};
  double x = kLabelWidth;
  for (const auto& [kind, text] : legend) {
    const bool used =
        std::any_of(timeline.boxes.begin(), timeline.boxes.end(),
                    [kind = kind](const TimelineBox& box) { return box.kind == kind; });
    if (!used) continue;
    svg << "<rect x=\"" << x << "\" y=\"" << legend_y - 10
        << "\" width=\"12\" height=\"12\" fill=\"" << colour(kind) << "\"/><text x=\"" << x + 16
        << "\" y=\"" << legend_y << "\">" << text << "</text>\n";
    x += 140;
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace pipetrain::schedule
