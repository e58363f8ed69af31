#include "io/rank_record.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sstream>

#include "io/atomic_file.h"
#include "io/read_file.h"

namespace pipetrain::io {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFolderVariable = "PIPETRAIN_RANK_RECORDS";

// Paths fixed at open_rank_record, so that signal handlers need no allocation.
char end_path[4096];
std::string identity_path;
std::string host_and_pid;

// Appends `value` in decimal to `out` (async-signal-safe).
char* put_number(char* out, int64_t value) {
  if (value < 0) {
    *out++ = '-';
    value = -value;
  }
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  while (n > 0) *out++ = digits[--n];
  return out;
}

void write_end(const char* how, int code) noexcept {
  if (end_path[0] == '\0') return;
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  char text[96];
  char* out = text;
  for (const char* c = how; *c; ++c) *out++ = *c;
  *out++ = ' ';
  out = put_number(out, code);
  *out++ = ' ';
  out = put_number(out, static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec);
  *out++ = '\n';
  const int fd = ::open(end_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (::write(fd, text, static_cast<std::size_t>(out - text)) < 0) {
    // nothing more to do in a dying process
  }
  ::close(fd);
}

// A file of the folder, or nothing where a rank has not written it (yet).
std::string read_if_present(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path, error) ? read_file(path) : std::string();
}

}  // namespace

std::string stop_request_path() {
  const char* folder = std::getenv(kFolderVariable);
  return folder && *folder ? (fs::path(folder) / "stop-request").string() : std::string();
}

std::string stop_request() {
  const std::string path = stop_request_path();
  return path.empty() ? std::string() : read_if_present(path);
}

bool started_by_launcher() {
  const char* folder = std::getenv(kFolderVariable);
  return folder && *folder;
}

void open_rank_record(int rank) {
  const char* folder = std::getenv(kFolderVariable);
  if (!folder || !*folder || !fs::is_directory(folder)) return;  // e.g. another host
  const fs::path base = fs::path(folder) / ("rank-" + std::to_string(rank));
  const std::string end = base.string() + ".end";
  if (end.size() >= sizeof end_path) return;
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  host_and_pid = std::string(host) + " " + std::to_string(::getpid());
  identity_path = base.string();
  std::memcpy(end_path, end.c_str(), end.size() + 1);
  describe_rank("rank " + std::to_string(rank));
}

void describe_rank(const std::string& identity) {
  if (identity_path.empty()) return;
  try {
    write_file_atomically(identity_path, host_and_pid + " " + identity + "\n");
  } catch (const std::exception&) {
    // the account is a courtesy to the launcher; the job goes on without it
  }
}

void record_exit(int status) noexcept {
  write_end("exit", status);
}

void record_signal(int signal) noexcept {
  write_end("signal", signal);
}

std::vector<RankEnding> read_rank_records(const fs::path& folder) {
  std::vector<RankEnding> endings;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || name.find('.') != std::string::npos) continue;
    RankEnding ending;
    ending.rank = std::atoi(name.c_str() + 5);
    std::istringstream who(read_if_present(entry.path()));
    who >> ending.host >> ending.pid;
    std::getline(who >> std::ws, ending.identity);
    std::istringstream end(read_if_present(entry.path().string() + ".end"));
    std::string how;
    if (end >> how >> ending.code >> ending.when_ns) {
      ending.how = how == "exit" ? RankEnding::How::kExited : RankEnding::How::kSignalled;
    }
    endings.push_back(ending);
  }
  std::sort(endings.begin(), endings.end(),
            [](const RankEnding& a, const RankEnding& b) { return a.rank < b.rank; });
  return endings;
}

}  // namespace pipetrain::io
