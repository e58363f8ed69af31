#include "pipetrain/io/errors.h"

#include <cstdio>
#include <new>
#include <regex>

#include "io/activity.h"

namespace pipetrain::io {
namespace {

// The message without LibTorch's backtrace (its two formats).
std::string without_backtrace(std::string what) {
  for (const char* marker : {"\nException raised from ", "\nframe #0"}) {
    const auto at = what.find(marker);
    if (at != std::string::npos) what.resize(at);
  }
  return what;
}

std::string gibibytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// The size a failed allocation asked for, as the allocator wrote it; empty if not there.
std::string requested_size(const std::string& what) {
  static const std::regex cpu("you tried to allocate ([0-9]+) bytes");
  static const std::regex cuda("[Tt]ried to allocate ([0-9.]+ [KMGT]?i?B)");
  std::smatch match;
  if (std::regex_search(what, match, cpu)) return gibibytes(std::stod(match[1].str()));
  if (std::regex_search(what, match, cuda)) return match[1].str();
  return {};
}

bool out_of_memory(const std::exception& e, const std::string& what) {
  return dynamic_cast<const std::bad_alloc*>(&e) != nullptr ||
         what.find("can't allocate memory") != std::string::npos ||
         what.find("CUDA out of memory") != std::string::npos;
}

std::string describe(const std::exception& e) {
  std::string what = without_backtrace(e.what());
  if (!out_of_memory(e, what)) return what;
  const std::string activity = failed_activity();
  const std::string size = requested_size(what);
  return "out of memory" + (activity.empty() ? std::string() : " while " + activity) +
         (size.empty() ? " (" + what + ")" : ": tried to allocate " + size);
}

}  // namespace

std::string error_message(const std::exception& e) {
  try {
    return describe(e);
  } catch (...) {  // e.g. no memory left to describe a failed allocation with
    return e.what();
  }
}

}  // namespace pipetrain::io
