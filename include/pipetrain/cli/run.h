#pragma once

// The pipetrain command line as a function: what the pipetrain binary's main() calls, and
// what a program calls after registering model families of its own
// (models::register_family), so that `train`, `eval`, `generate`, `logits`, `partition`
// and the rest run its models with the trainer's data, checkpoints, resume and metrics:
//
//   int main(int argc, char** argv) {
//     pipetrain::models::register_family(my_family());
//     return pipetrain::cli::run(argc, argv);
//   }
//
// Returns the exit status: 0, 1 for a failure, 2 for bad input (said in one line).
namespace pipetrain::cli {

int run(int argc, char** argv);

}  // namespace pipetrain::cli
