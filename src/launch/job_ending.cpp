#include "launch/job_ending.h"

#include <csignal>
#include <cstring>

namespace pipetrain::launch {
namespace {

using How = io::RankEnding::How;

bool stop_signal(int signal) {
  return signal == SIGINT || signal == SIGTERM || signal == SIGHUP || signal == SIGUSR2;
}

std::string who(const io::RankEnding& r) {
  return (r.identity.empty() ? "rank " + std::to_string(r.rank) : r.identity) + ", pid " +
         std::to_string(r.pid) + " on " + r.host + ",";
}

const io::RankEnding* first(const std::vector<io::RankEnding>& ranks,
                            bool (*matches)(const io::RankEnding&)) {
  const io::RankEnding* found = nullptr;
  for (const auto& r : ranks) {
    if (matches(r) && (!found || r.when_ns < found->when_ns)) found = &r;
  }
  return found;
}

}  // namespace

std::string signal_name(int signal) {
  const char* abbreviation = ::sigabbrev_np(signal);
  return abbreviation ? std::string("SIG") + abbreviation : "signal " + std::to_string(signal);
}

std::string describe_ending(const std::vector<io::RankEnding>& ranks, int job_ranks,
                            int mpirun_status) {
  if (mpirun_status == 0 || ranks.empty()) return {};  // none: ranks that never started one
  for (const auto& r : ranks) {
    if (r.how == How::kExited && r.code != 0) return {};  // it said why
  }
  const std::string prefix = "pipetrain: launch: ";
  for (const auto& r : ranks) {  // lowest rank first: unknown ones carry no time
    if (r.how != How::kUnknown) continue;
    if (mpirun_status <= 128)
      return prefix + who(r) + " ended without a word (exit status " +
             std::to_string(mpirun_status) + ")";
    if (mpirun_status - 128 != SIGKILL)
      return prefix + who(r) + " died of " + signal_name(mpirun_status - 128) + " without a word";
    return prefix + who(r) + " was killed by SIGKILL from outside the job (a kill, or the " +
           "kernel's out-of-memory killer)";
  }
  if (const auto* crash = first(ranks, [](const io::RankEnding& r) {
        return r.how == How::kSignalled && !stop_signal(r.code);
      })) {
    return prefix + who(*crash) + " died of " + signal_name(crash->code);
  }
  if (static_cast<int>(ranks.size()) < job_ranks) {  // the cause may be elsewhere
    return prefix + "the job ended with status " + std::to_string(mpirun_status) + "; " +
           std::to_string(job_ranks - static_cast<int>(ranks.size())) + " of " +
           std::to_string(job_ranks) + " ranks left no account on this host (other hosts?)";
  }
  if (const auto* stopped = first(ranks, [](const io::RankEnding& r) {
        return r.how == How::kSignalled && stop_signal(r.code);
      })) {
    return prefix + who(*stopped) + " was stopped by " +
           signal_name(stopped->code == SIGUSR2 ? SIGTERM : stopped->code) +
           " from outside the job";
  }
  return {};
}

}  // namespace pipetrain::launch
