// The pipetrain binary: the command line of cli::run with the built-in models.
#include "pipetrain/cli/run.h"

int main(int argc, char** argv) {
  return pipetrain::cli::run(argc, argv);
}
