#include "pipetrain/io/read_file.h"

#include <fstream>
#include <sstream>

#include "pipetrain/io/errors.h"

namespace pipetrain {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot be read (missing?)");
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace pipetrain
