// npy.hpp — minimal writer of NumPy .npy files (format version 1.0,
// little-endian, C order) so that dumps load with numpy.load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mc::io {

// Write data (row-major, shape) as '<f4' or '<f8'. Throws std::runtime_error
// naming the path and the OS reason (strerror) on any I/O failure.
void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape);
void write_npy(const std::string& path, const double* data, const std::vector<int64_t>& shape);

}  // namespace mc::io
