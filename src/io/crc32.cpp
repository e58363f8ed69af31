#include "pipetrain/io/crc32.h"

#include <boost/crc.hpp>

namespace pipetrain::io {

uint32_t crc32(std::string_view bytes) {
  boost::crc_32_type crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

}  // namespace pipetrain::io
