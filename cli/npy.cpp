// npy.cpp — .npy v1.0 writer (header padded to a multiple of 64 bytes); I/O
// errors name the file and the OS reason.
#include "cli/npy.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace mc::io {

namespace {

std::string shape_tuple(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < shape.size(); ++i) os << shape[i] << (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  os << ")";
  return os.str();
}

[[noreturn]] void io_error(const char* what, const std::string& path, int e) {
  throw std::runtime_error(std::string("npy: cannot ") + what + " '" + path + "': " +
                           (e ? std::strerror(e) : "unknown error"));
}

void write_raw(const std::string& path, const char* descr, const void* data, size_t elem_bytes,
               const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " +
                       shape_tuple(shape) + ", }";
  const size_t preamble = 10;  // magic(6) + version(2) + header_len(2)
  size_t total = preamble + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) io_error("open for writing", path, errno);
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const uint16_t hl = uint16_t(header.size());
  const unsigned char hlb[2] = {uint8_t(hl & 0xff), uint8_t(hl >> 8)};
  const size_t bytes = size_t(n) * elem_bytes;
  bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(hlb, 1, 2, f) == 2 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(data, 1, bytes, f) == bytes;
  int e = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    e = errno;
  }
  if (!ok) io_error("write", path, e);
}

}  // namespace

void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  write_raw(path, "<f4", data, 4, shape);
}
void write_npy(const std::string& path, const double* data, const std::vector<int64_t>& shape) {
  write_raw(path, "<f8", data, 8, shape);
}

}  // namespace mc::io
