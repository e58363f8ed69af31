// How long planning, validating and simulating a batch's schedule takes: the engine
// plans once per batch shape, so this bounds the schedule's share of step overhead.
#include <chrono>
#include <cstdio>

#include "pipetrain/schedule/schedule.h"
#include "pipetrain/schedule/simulator.h"
#include "pipetrain/schedule/validator.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double microseconds_per_call(F&& f) {
  int calls = 0;
  const auto start = Clock::now();
  auto elapsed = Clock::duration::zero();
  while (elapsed < std::chrono::milliseconds(200)) {
    f();
    ++calls;
    elapsed = Clock::now() - start;
  }
  return std::chrono::duration<double, std::micro>(elapsed).count() / calls;
}

}  // namespace

int main() {
  using namespace pipetrain::schedule;
  std::printf("%-12s %4s %4s %3s %12s %12s %12s %14s\n", "kind", "m", "p", "v", "plan us",
              "validate us", "simulate us", "instructions");
  struct Case {
    const char* kind;
    PipeShape shape;
  };
  const Case cases[] = {
      {"train", {8, 4, 1}},         {"train", {64, 16, 1}}, {"gpipe", {64, 16, 1}},
      {"interleaved", {64, 16, 2}}, {"zb-h1", {64, 16, 1}}, {"train", {256, 64, 1}},
  };
  for (const auto& c : cases) {
    const PipelinePlan plan = plan_pipeline(c.kind, c.shape);
    std::size_t instructions = 0;
    for (const auto& steps : plan.stage_steps) {
      for (const auto& step : steps) instructions += step.size();
    }
    const double plan_us = microseconds_per_call([&] { plan_pipeline(c.kind, c.shape); });
    const double validate_us = microseconds_per_call([&] { validate(plan); });
    const double simulate_us = microseconds_per_call([&] { simulate(plan, {}); });
    std::printf("%-12s %4d %4d %3d %12.1f %12.1f %12.1f %14zu\n", c.kind, c.shape.micro_batches,
                c.shape.stages, c.shape.chunks, plan_us, validate_us, simulate_us, instructions);
  }
  return 0;
}
