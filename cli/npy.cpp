// npy.cpp — .npy v1.0 writer (header padded to a multiple of 64 bytes).
#include "cli/npy.hpp"

#include <cstdio>
#include <fstream>
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
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("npy: cannot open '" + path + "' for writing");
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  f.write(reinterpret_cast<const char*>(magic), 8);
  const uint16_t hl = uint16_t(header.size());
  const unsigned char hlb[2] = {uint8_t(hl & 0xff), uint8_t(hl >> 8)};
  f.write(reinterpret_cast<const char*>(hlb), 2);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(static_cast<const char*>(data), std::streamsize(size_t(n) * elem_bytes));
  if (!f) throw std::runtime_error("npy: write failed for '" + path + "'");
}

}  // namespace

void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  write_raw(path, "<f4", data, 4, shape);
}
void write_npy(const std::string& path, const double* data, const std::vector<int64_t>& shape) {
  write_raw(path, "<f8", data, 8, shape);
}

std::string json_shape(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

}  // namespace mc::io
