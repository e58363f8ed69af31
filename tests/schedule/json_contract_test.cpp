// The JSON form, against an oracle written straight from docs/spec/schedules.md, for
// every m <= 16, p <= 8 and stage.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "schedule/render.h"

namespace pipetrain::schedule {
namespace {

using nlohmann::json;

json train_oracle(int m, int p, int s) {
  const int buffers = std::max(2, std::min(p - s, m));
  auto valid = [m](int mb) { return 0 <= mb && mb < m; };
  auto floor_div = [](int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  json steps = json::array();
  int prev = -1;
  for (int t = 0; t < 2 * (m + p - 1); ++t) {
    int cur = 0;
    if (t % 2 == 0 && s % 2 == 0) cur = floor_div(t, 2) - floor_div(s, 2);
    if (t % 2 == 1 && s % 2 == 1) cur = floor_div(t - 1, 2) - floor_div(s, 2);
    if (t % 2 == 0 && s % 2 == 1) cur = floor_div(t, 2) - p + floor_div(s + 1, 2);
    if (t % 2 == 1 && s % 2 == 0) cur = floor_div(t - 1, 2) - p + 1 + floor_div(s, 2);
    const bool forward = t % 2 == s % 2;
    json step = json::array();
    if (forward) {
      if (valid(prev) && s > 0) step.push_back({"SendGrad", prev % buffers});
      if (valid(cur) && s > 0) step.push_back({"RecvActivation", cur % buffers});
    } else {
      if (valid(cur) && s < p - 1) step.push_back({"RecvGrad", cur % buffers});
      if (valid(prev) && s < p - 1) step.push_back({"SendActivation", prev % buffers});
    }
    if (forward && valid(cur) && (s == 0 || s == p - 1)) {
      step.push_back({"LoadMicroBatch", cur % buffers});
    }
    if (valid(cur)) step.push_back({forward ? "ForwardPass" : "BackwardPass", cur % buffers});
    if (t == 2 * (m + p - 1) - 1) {
      step.push_back(json::array({"ReduceTiedGrads"}));
      step.push_back(json::array({"ReduceGrads"}));
      step.push_back(json::array({"OptimizerStep"}));
    }
    steps.push_back(step);
    prev = cur;
  }
  return {{"num_pipe_buffers", buffers}, {"steps", steps}};
}

json inference_oracle(int m, int p, int s) {
  auto valid = [m](int mb) { return 0 <= mb && mb < m; };
  json steps = json::array();
  for (int t = 0; t < m + p - 1; ++t) {
    const int mb = t - s;
    const int recv = s % 2 == 0 ? t % 2 : (t + 1) % 2;
    const int send = s % 2 == 0 ? (t + 1) % 2 : t % 2;
    json step = json::array();
    if (valid(mb) && (s == 0 || s == p - 1)) step.push_back({"LoadMicroBatch", recv});
    const json send_op = {"SendActivation", send};
    const json recv_op = {"RecvActivation", recv};
    const bool do_send = s < p - 1 && valid(mb - 1);
    const bool do_recv = s > 0 && valid(mb);
    if (s % 2 == 0) {
      if (do_send) step.push_back(send_op);
      if (do_recv) step.push_back(recv_op);
    } else {
      if (do_recv) step.push_back(recv_op);
      if (do_send) step.push_back(send_op);
    }
    if (valid(mb)) step.push_back({"ForwardPass", recv});
    steps.push_back(step);
  }
  return {{"num_pipe_buffers", 2}, {"steps", steps}};
}

TEST(JsonContract, TrainAndInferenceMatchTheSpecEverywhere) {
  for (int m = 1; m <= 16; ++m) {
    for (int p = 1; p <= 8; ++p) {
      const PipelinePlan train = plan_pipeline("train", {m, p});
      const PipelinePlan inference = plan_pipeline("inference", {m, p});
      for (int s = 0; s < p; ++s) {
        ASSERT_EQ(json::parse(to_json(train, s)), train_oracle(m, p, s))
            << "train m=" << m << " p=" << p << " s=" << s;
        ASSERT_EQ(json::parse(to_json(inference, s)), inference_oracle(m, p, s))
            << "inference m=" << m << " p=" << p << " s=" << s;
      }
    }
  }
}

TEST(JsonContract, WorkedExampleIsOneObjectWithTheSpecKeys) {
  const json object = json::parse(to_json(plan_pipeline("train", {4, 3}), 1));
  EXPECT_EQ(object.size(), 2u);
  EXPECT_EQ(object["num_pipe_buffers"], 2);
  EXPECT_EQ(object["steps"][0], json::array());
  EXPECT_EQ(object["steps"][11], json::parse(R"([["SendGrad", 1], ["ReduceTiedGrads"],
                                                 ["ReduceGrads"], ["OptimizerStep"]])"));
}

TEST(JsonContract, InterleavedInstructionsAppendTheChunk) {
  const json object = json::parse(to_json(plan_pipeline("interleaved", {4, 2, 2}), 0));
  EXPECT_EQ(object["steps"][0][0], json::parse(R"(["LoadMicroBatch", 0, 0])"));
}

}  // namespace
}  // namespace pipetrain::schedule
