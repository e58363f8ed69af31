#include "pipetrain/schedule/validator.h"

#include <algorithm>
#include <deque>
#include <sstream>

namespace pipetrain::schedule {
namespace {

// Where an instruction sits in the plan.
struct Site {
  int stage = 0;
  int step = 0;
  int index = 0;
  Instruction instruction;
};

struct Message {
  int micro_batch = 0;
  Site sent_at;
  int id = 0;  // in sending order, for synchronous sends
};

// What a pipe buffer holds, and which of its contents are still needed.
struct Buffer {
  int micro_batch = -1;
  int chunk = 0;
  bool has_input = false;          // loaded or received, not yet forwarded
  bool awaits_backward = false;    // forwarded (training): activation kept for backward
  bool output_unsent = false;      // forwarded output not yet sent downstream
  bool has_output_grad = false;    // gradient received from downstream
  bool input_grad_unsent = false;  // backward done, gradient not yet sent upstream
  bool awaits_weight = false;      // BackwardInput done, BackwardWeight pending
  int labels = -1;                 // micro-batch whose labels are loaded, last stage only

  // Why writing a new input here would destroy something still needed; empty if free.
  std::string busy_reason() const {
    const std::string mb = "micro-batch " + std::to_string(micro_batch);
    if (has_input) return mb + " is not yet forwarded";
    if (output_unsent) return mb + "'s activation is not yet sent";
    if (awaits_backward) return mb + "'s activation still waits for backward";
    if (input_grad_unsent) return mb + "'s gradient is not yet sent";
    if (awaits_weight) return mb + " still waits for its weight gradient";
    return {};
  }
};

class Execution {
 public:
  Execution(const PipelinePlan& plan, SendMode sends)
      : plan_(plan),
        synchronous_(sends == SendMode::kSynchronous),
        shape_(plan.shape),
        last_vs_(shape_.virtual_stages() - 1),
        buffers_(shape_.stages),
        forwarded_(shape_.virtual_stages(), 0),
        backwarded_(shape_.virtual_stages(), 0),
        weighted_(shape_.virtual_stages(), 0),
        backwards_done_(shape_.virtual_stages()),
        weights_done_(shape_.virtual_stages()),
        activations_(shape_.virtual_stages()),
        grads_(shape_.virtual_stages()),
        optimizer_steps_(shape_.stages, 0),
        unreceived_send_(shape_.stages) {
    for (int s = 0; s < shape_.stages; ++s) buffers_[s].resize(plan.num_pipe_buffers[s]);
  }

  std::optional<Violation> run() {
    if (synchronous_) {
      if (auto v = run_without_barriers()) return v;
      return final_checks();
    }
    std::size_t total_steps = 0;
    for (const auto& steps : plan_.stage_steps) total_steps = std::max(total_steps, steps.size());
    for (int t = 0; t < static_cast<int>(total_steps); ++t) {
      if (auto v = run_step(t)) return v;
    }
    return final_checks();
  }

 private:
  enum class Outcome { kDone, kBlocked };

  const Step* step_of(int stage, int t) const {
    const auto& steps = plan_.stage_steps[stage];
    return t < static_cast<int>(steps.size()) ? &steps[t] : nullptr;
  }

  // All stages run step t as far as they can, again and again, until every stage
  // finished it (then the barrier opens) or none can move (deadlock).
  std::optional<Violation> run_step(int t) {
    std::vector<std::size_t> pos(shape_.stages, 0);
    while (true) {
      bool progressed = false;
      bool finished = true;
      for (int s = 0; s < shape_.stages; ++s) {
        const Step* step = step_of(s, t);
        if (!step) continue;
        while (pos[s] < step->size()) {
          const Site site{s, t, static_cast<int>(pos[s]), (*step)[pos[s]]};
          if (execute_completing(site) == Outcome::kBlocked) break;
          if (violation_) return violation_;
          ++pos[s];
          progressed = true;
        }
        finished = finished && pos[s] == step->size();
      }
      if (finished) return std::nullopt;
      if (!progressed) return deadlock(t, pos);
    }
  }

  // Synchronous sends: every stage runs its whole stream as far as it can, again and again,
  // with no barrier between steps (an engine with blocking sends has none), until all
  // finished or none can move.
  std::optional<Violation> run_without_barriers() {
    struct Cursor {
      int step = 0;
      std::size_t index = 0;
    };
    std::vector<Cursor> at(shape_.stages);
    while (true) {
      bool progressed = false;
      bool finished = true;
      for (int s = 0; s < shape_.stages; ++s) {
        Cursor& c = at[s];
        while (const Step* step = step_of(s, c.step)) {
          if (c.index == step->size()) {
            ++c.step;
            c.index = 0;
            continue;
          }
          const Site site{s, c.step, static_cast<int>(c.index), (*step)[c.index]};
          if (execute_completing(site) == Outcome::kBlocked) break;
          if (violation_) return violation_;
          ++c.index;
          progressed = true;
        }
        finished = finished && !step_of(s, c.step);
      }
      if (finished) return std::nullopt;
      if (!progressed) {
        for (int s = 0; s < shape_.stages; ++s) {
          if (!step_of(s, at[s].step)) continue;
          std::vector<std::size_t> pos(shape_.stages, 0);
          for (int r = 0; r < shape_.stages; ++r) {
            const Step* step = step_of(r, at[s].step);
            pos[r] = r == s ? at[s].index : (step ? step->size() : 0);
          }
          return deadlock(at[s].step, pos);
        }
      }
    }
  }

  Violation deadlock(int t, const std::vector<std::size_t>& pos) const {
    for (int s = 0; s < shape_.stages; ++s) {
      const Step* step = step_of(s, t);
      if (!step || pos[s] == step->size()) continue;
      const Instruction& waiting = (*step)[pos[s]];
      const Peer peer = transfer_peer(shape_, s, waiting);
      const bool gradient = waiting.kind == OpKind::kRecvGrad || waiting.kind == OpKind::kSendGrad;
      std::ostringstream why;
      why << "deadlock: " << (is_send(waiting.kind) ? "sends " : "waits for ")
          << (gradient ? "a gradient" : "an activation")
          << (is_send(waiting.kind) ? " that stage " : " from stage ") << peer.stage << " (chunk "
          << peer.chunk << ")"
          << (is_send(waiting.kind) ? " does not receive" : " that is not sent")
          << (synchronous_ ? " while every stage waits" : " by the end of this step");
      return {s, t, static_cast<int>(pos[s]), waiting, why.str()};
    }
    return {0, t, 0, {}, "deadlock"};
  }

  void fail(const Site& site, const std::string& reason) {
    if (!violation_)
      violation_ = Violation{site.stage, site.step, site.index, site.instruction, reason};
  }

  Outcome reject(const Site& site, const std::string& reason) {
    fail(site, reason);
    return Outcome::kDone;
  }

  int vs_of(const Site& site) const {
    return shape_.virtual_stage(site.stage, site.instruction.chunk);
  }

  // Returns the buffer an instruction names, or null after reporting a bad operand.
  Buffer* buffer_of(const Site& site) {
    const Instruction& in = site.instruction;
    auto& buffers = buffers_[site.stage];
    if (in.buffer < 0 || in.buffer >= static_cast<int>(buffers.size())) {
      fail(site, "buffer " + std::to_string(in.buffer) + " is outside the stage's " +
                     std::to_string(buffers.size()) + " buffers");
      return nullptr;
    }
    if (in.chunk < 0 || in.chunk >= shape_.chunks) {
      fail(site, "chunk " + std::to_string(in.chunk) + " does not exist");
      return nullptr;
    }
    return &buffers[in.buffer];
  }

  // The stated micro-batch must be the one the data flow puts there.
  void check_label(const Site& site, int actual) {
    const int stated = site.instruction.micro_batch;
    if (stated >= 0 && stated != actual) {
      fail(site, "names micro-batch " + std::to_string(stated) + " but acts on micro-batch " +
                     std::to_string(actual));
    }
  }

  void take_for_input(const Site& site, Buffer& buffer, int micro_batch) {
    const std::string busy = buffer.busy_reason();
    if (!busy.empty()) {
      fail(site, "overwrites buffer " + std::to_string(site.instruction.buffer) + " while " + busy);
      return;
    }
    const int labels = buffer.labels;
    buffer = Buffer{};
    buffer.labels = labels;
    buffer.micro_batch = micro_batch;
    buffer.chunk = site.instruction.chunk;
    buffer.has_input = true;
  }

  bool holds(const Site& site, const Buffer& buffer, bool state, const char* what) {
    if (!state || buffer.chunk != site.instruction.chunk) {
      fail(site, "buffer " + std::to_string(site.instruction.buffer) + " holds no " + what);
      return false;
    }
    check_label(site, buffer.micro_batch);
    return true;
  }

  // Backward passes may run in any micro-batch order (PyTorch's looped BFS runs them last
  // first), each once.
  void check_once(const Site& site, std::vector<std::vector<bool>>& done, std::vector<int>& count,
                  const char* pass, int micro_batch) {
    const int vs = vs_of(site);
    auto& seen = done[vs];
    if (seen.empty()) seen.resize(shape_.micro_batches, false);
    if (micro_batch < 0 || micro_batch >= shape_.micro_batches || seen[micro_batch]) {
      fail(site, std::string(pass) + " of micro-batch " + std::to_string(micro_batch) +
                     " runs twice on virtual stage " + std::to_string(vs));
      return;
    }
    seen[micro_batch] = true;
    ++count[vs];
  }

  void check_order(const Site& site, std::vector<int>& next, const char* pass, int micro_batch) {
    const int vs = vs_of(site);
    if (micro_batch != next[vs]) {
      fail(site, std::string(pass) + " of micro-batch " + std::to_string(micro_batch) +
                     " out of order on virtual stage " + std::to_string(vs) + " (expected " +
                     std::to_string(next[vs]) + ")");
      return;
    }
    ++next[vs];
  }

  // With synchronous sends a send completes only once its message is received: the stage
  // stays on it until then.
  Outcome execute_completing(const Site& site) {
    std::optional<int>& unreceived = unreceived_send_[site.stage];
    if (unreceived) {
      if (!received_[*unreceived]) return Outcome::kBlocked;
      unreceived.reset();
      return Outcome::kDone;
    }
    const int sent_before = static_cast<int>(received_.size());
    const Outcome outcome = execute(site);
    if (!synchronous_ || static_cast<int>(received_.size()) == sent_before) return outcome;
    // A hand-over between a rank's own chunks is a local move: it never waits.
    if (is_local_transfer(shape_, site.stage, site.instruction)) return outcome;
    unreceived = sent_before;
    return Outcome::kBlocked;
  }

  void post(std::deque<Message>& channel, int micro_batch, const Site& site) {
    channel.push_back({micro_batch, site, static_cast<int>(received_.size())});
    received_.push_back(false);
  }

  Outcome execute(const Site& site) {
    const Instruction& in = site.instruction;
    if (optimizer_steps_[site.stage] > 0) {
      fail(site, "comes after the OptimizerStep");
      return Outcome::kDone;
    }
    if (!has_buffer(in.kind)) {
      end_of_batch(site);
      return Outcome::kDone;
    }
    Buffer* buffer = buffer_of(site);
    if (!buffer) return Outcome::kDone;
    const int vs = vs_of(site);
    const bool first = vs == 0;
    const bool last = vs == last_vs_;
    const bool backward_kind = in.kind == OpKind::kBackwardPass ||
                               in.kind == OpKind::kBackwardInput ||
                               in.kind == OpKind::kBackwardWeight || in.kind == OpKind::kRecvGrad ||
                               in.kind == OpKind::kSendGrad;
    if (backward_kind && !plan_.trains) {
      fail(site, "a forward-only schedule runs " + std::string(name(in.kind)));
      return Outcome::kDone;
    }
    if (is_recv(in.kind)) return receive(site, *buffer, first, last);
    switch (in.kind) {
      case OpKind::kLoadMicroBatch:
        load(site, *buffer, first, last);
        break;
      case OpKind::kForwardPass:
        forward(site, *buffer, last);
        break;
      case OpKind::kSendActivation:
        if (last) return reject(site, "the last stage has no stage to send to");
        if (holds(site, *buffer, buffer->output_unsent, "unsent activation")) {
          buffer->output_unsent = false;
          post(activations_[vs + 1], buffer->micro_batch, site);
        }
        break;
      case OpKind::kBackwardPass:
      case OpKind::kBackwardInput:
        backward(site, *buffer, first, last);
        break;
      case OpKind::kBackwardWeight:
        if (holds(site, *buffer, buffer->awaits_weight, "pending weight gradient")) {
          check_once(site, weights_done_, weighted_, "BackwardWeight", buffer->micro_batch);
          buffer->awaits_weight = false;
        }
        break;
      case OpKind::kSendGrad:
        if (first) return reject(site, "the first stage has no stage to send to");
        if (holds(site, *buffer, buffer->input_grad_unsent, "unsent gradient")) {
          buffer->input_grad_unsent = false;
          post(grads_[vs - 1], buffer->micro_batch, site);
        }
        break;
      default:
        break;
    }
    return Outcome::kDone;
  }

  // A receive takes the oldest message on its channel, or blocks while there is none.
  Outcome receive(const Site& site, Buffer& buffer, bool first, bool last) {
    const bool activation = site.instruction.kind == OpKind::kRecvActivation;
    if (activation ? first : last) {
      return reject(site, std::string("the ") + (first ? "first" : "last") +
                              " stage has no stage to receive from");
    }
    auto& channel = (activation ? activations_ : grads_)[vs_of(site)];
    if (channel.empty()) return Outcome::kBlocked;
    const Message message = channel.front();
    channel.pop_front();
    received_[message.id] = true;
    check_label(site, message.micro_batch);
    if (activation) {
      take_for_input(site, buffer, message.micro_batch);
    } else if (!buffer.awaits_backward || buffer.micro_batch != message.micro_batch) {
      fail(site, "the gradient of micro-batch " + std::to_string(message.micro_batch) +
                     " arrives in buffer " + std::to_string(site.instruction.buffer) +
                     ", which holds no activation of it");
    } else {
      buffer.has_output_grad = true;
    }
    return Outcome::kDone;
  }

  void load(const Site& site, Buffer& buffer, bool first, bool last) {
    if (!first && !last) {
      fail(site,
           "virtual stage " + std::to_string(vs_of(site)) + " needs neither inputs nor labels");
      return;
    }
    if (first) {
      check_label(site, inputs_loaded_);
      take_for_input(site, buffer, inputs_loaded_++);
    }
    if (last) {
      if (buffer.labels >= 0) {
        fail(site, "overwrites the labels of micro-batch " + std::to_string(buffer.labels) +
                       " before its forward");
        return;
      }
      check_label(site, labels_loaded_);
      buffer.labels = labels_loaded_++;
    }
  }

  void forward(const Site& site, Buffer& buffer, bool last) {
    if (!holds(site, buffer, buffer.has_input, "input to forward")) return;
    check_order(site, forwarded_, "ForwardPass", buffer.micro_batch);
    if (last) {
      if (buffer.labels != buffer.micro_batch) {
        fail(site, "the last stage computes the loss of micro-batch " +
                       std::to_string(buffer.micro_batch) + " without its labels");
        return;
      }
      buffer.labels = -1;
    }
    buffer.has_input = false;
    buffer.output_unsent = !last;
    buffer.awaits_backward = plan_.trains;
  }

  void backward(const Site& site, Buffer& buffer, bool first, bool last) {
    if (!holds(site, buffer, buffer.awaits_backward, "activation awaiting backward")) return;
    if (!last && !buffer.has_output_grad) {
      fail(site, "backward of micro-batch " + std::to_string(buffer.micro_batch) +
                     " before its output gradient arrived");
      return;
    }
    check_once(site, backwards_done_, backwarded_, name(site.instruction.kind).data(),
               buffer.micro_batch);
    // A full backward also makes the weight gradient (schedules may mix both kinds).
    if (site.instruction.kind == OpKind::kBackwardPass)
      check_once(site, weights_done_, weighted_, "BackwardPass", buffer.micro_batch);
    buffer.awaits_backward = false;
    buffer.has_output_grad = false;
    buffer.input_grad_unsent = !first;
    buffer.awaits_weight = site.instruction.kind == OpKind::kBackwardInput;
  }

  void end_of_batch(const Site& site) {
    if (!plan_.trains) {
      fail(site, "a forward-only schedule runs " + std::string(name(site.instruction.kind)));
      return;
    }
    for (int chunk = 0; chunk < shape_.chunks; ++chunk) {
      const int vs = shape_.virtual_stage(site.stage, chunk);
      const bool weights_pending = plan_.splits_backward && weighted_[vs] < shape_.micro_batches;
      if (backwarded_[vs] < shape_.micro_batches || weights_pending) {
        fail(site,
             "runs before every backward of virtual stage " + std::to_string(vs) + " finished");
        return;
      }
    }
    if (site.instruction.kind == OpKind::kOptimizerStep) ++optimizer_steps_[site.stage];
  }

  std::optional<Violation> final_checks() {
    for (const auto* channels : {&activations_, &grads_}) {
      for (const auto& channel : *channels) {
        if (channel.empty()) continue;
        const Message& m = channel.front();
        fail(m.sent_at,
             "micro-batch " + std::to_string(m.micro_batch) + " is sent but never received");
        return violation_;
      }
    }
    const int m = shape_.micro_batches;
    for (int vs = 0; vs <= last_vs_; ++vs) {
      const Site end{shape_.stage_of(vs),
                     static_cast<int>(plan_.stage_steps[shape_.stage_of(vs)].size()),
                     0,
                     {}};
      auto missing = [&](int micro_batch, const char* pass) {
        fail(end, "micro-batch " + std::to_string(micro_batch) + " never runs " + pass +
                      " on virtual stage " + std::to_string(vs));
        return violation_;
      };
      // Backwards may run in any order: the first micro-batch without one.
      auto first_missing = [&](const std::vector<std::vector<bool>>& done) {
        const auto& seen = done[vs];
        if (seen.empty()) return 0;
        return static_cast<int>(std::find(seen.begin(), seen.end(), false) - seen.begin());
      };
      if (forwarded_[vs] < m) return missing(forwarded_[vs], "forward");
      if (plan_.trains && backwarded_[vs] < m)
        return missing(first_missing(backwards_done_), "backward");
      if (plan_.splits_backward && weighted_[vs] < m)
        return missing(first_missing(weights_done_), "its weight gradient");
    }
    for (int s = 0; plan_.trains && s < shape_.stages; ++s) {
      if (optimizer_steps_[s] != 1) {
        fail({s, static_cast<int>(plan_.stage_steps[s].size()), 0, {}},
             "runs " + std::to_string(optimizer_steps_[s]) + " optimizer steps, not one");
        return violation_;
      }
    }
    return std::nullopt;
  }

  const PipelinePlan& plan_;
  const bool synchronous_;
  const PipeShape shape_;
  const int last_vs_;
  std::vector<std::vector<Buffer>> buffers_;  // per stage
  std::vector<int> forwarded_;                // per virtual stage: next micro-batch expected
  std::vector<int> backwarded_;
  std::vector<int> weighted_;
  std::vector<std::vector<bool>> backwards_done_;  // per virtual stage, per micro-batch
  std::vector<std::vector<bool>> weights_done_;
  std::vector<std::deque<Message>> activations_;  // per receiving virtual stage
  std::vector<std::deque<Message>> grads_;
  std::vector<int> optimizer_steps_;                 // per stage
  std::vector<bool> received_;                       // per message id
  std::vector<std::optional<int>> unreceived_send_;  // per stage: the send it waits on
  int inputs_loaded_ = 0;
  int labels_loaded_ = 0;
  std::optional<Violation> violation_;
};

}  // namespace

std::string Violation::to_string() const {
  std::ostringstream out;
  out << "stage " << stage << ", step " << step << ", instruction " << index;
  if (instruction.kind != OpKind{} || instruction.buffer >= 0) {
    out << " (" << name(instruction.kind);
    if (instruction.buffer >= 0) out << " " << instruction.buffer;
    out << ")";
  }
  out << ": " << reason;
  return out.str();
}

std::optional<Violation> validate(const PipelinePlan& plan, SendMode sends) {
  return Execution(plan, sends).run();
}

}  // namespace pipetrain::schedule
