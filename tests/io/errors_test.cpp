#include "pipetrain/io/errors.h"

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

#include "io/activity.h"

namespace pipetrain::io {
namespace {

// The message for `error` thrown two activities deep, as a top-level handler sees it.
template <typename E>
std::string message_after_unwinding(const E& error, const std::string& outer,
                                    const std::string& inner) {
  try {
    const Activity a(outer);
    const Activity b(inner);
    throw error;
  } catch (const std::exception& e) {
    return error_message(e);
  }
}

TEST(ErrorMessage, CutsLibTorchsBacktraces) {
  EXPECT_EQ(error_message(std::runtime_error("shape mismatch\nException raised from f at x.cpp")),
            "shape mismatch");
  EXPECT_EQ(error_message(std::runtime_error("[enforce fail] err == 0\nframe #0: c10::f()")),
            "[enforce fail] err == 0");
}

TEST(ErrorMessage, NamesWhatAFailedAllocationWasFor) {
  EXPECT_EQ(message_after_unwinding(std::bad_alloc(), "building the model", "layer 3"),
            "out of memory while layer 3 (std::bad_alloc)");
  EXPECT_EQ(message_after_unwinding(
                std::runtime_error("[enforce fail at alloc_cpu.cpp:127] err == 0. "
                                   "DefaultCPUAllocator: can't allocate memory: you tried to "
                                   "allocate 51539607552 bytes. Error code 12\nframe #0: f"),
                "building the model's layers", "a layer"),
            "out of memory while a layer: tried to allocate 48.0 GiB");
  EXPECT_EQ(message_after_unwinding(std::runtime_error("CUDA out of memory. Tried to allocate "
                                                       "20.00 GiB. GPU 0 has a total capacity"),
                                    "training step 3", "forward"),
            "out of memory while forward: tried to allocate 20.00 GiB");
}

TEST(ErrorMessage, OutsideAnyActivityStillSaysOutOfMemory) {
  EXPECT_EQ(error_message(std::bad_alloc()), "out of memory (std::bad_alloc)");
  EXPECT_EQ(error_message(std::runtime_error("plain failure")), "plain failure");
}

}  // namespace
}  // namespace pipetrain::io
