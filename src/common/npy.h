#pragma once
// float32 .npy files (NumPy format versions 1.0, 2.0 and 3.0): C order, little-endian '<f4' only.
//
// File layout, as NumPy's format.py writes it:
//   bytes 0..5   magic "\x93NUMPY"
//   byte  6, 7   major, minor version (1.0, 2.0 or 3.0)
//   then         header length L: uint16 little-endian (1.0) or uint32 little-endian (2.0, 3.0)
//   then         L bytes of header: a Python dict literal, e.g.
//                {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }   padded with spaces, '\n'
//   then         the data: prod(shape) float32 values, little-endian, C (row-major) order
//
// A .npy file is untrusted input: every size and offset is checked against the bytes actually
// present, and anything else (another dtype, Fortran order, a malformed header, missing or extra
// data bytes) is rejected with a nibble::Error that names the problem.
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace nibble {

inline constexpr int kNpyMaxDims = 64;                 // NumPy 2's NPY_MAXDIMS
inline constexpr uint32_t kNpyMaxHeaderBytes = 1 << 20;  // NumPy itself refuses headers over 10000 bytes

struct NpyArray {
  std::vector<int64_t> shape;  // empty for a 0-d (scalar) array
  std::vector<float> data;     // [prod(shape)] in C order

  int64_t numel() const { return static_cast<int64_t>(data.size()); }
};

// Parses a whole .npy file held in memory. Throws nibble::Error on anything but a well-formed
// float32 C-order file whose data is exactly prod(shape) * 4 bytes.
NpyArray parse_npy(std::span<const uint8_t> bytes);

// Reads and parses a file; the error message names the path.
NpyArray read_npy(const std::filesystem::path& path);

// Encodes shape + data as a version 1.0 file (2.0 when the header needs more than 65535 bytes),
// header padded with spaces so that the data starts at a multiple of 64 bytes.
// Throws nibble::Error when prod(shape) != data.size() or a dimension is negative.
std::vector<uint8_t> serialize_npy(std::span<const int64_t> shape, std::span<const float> data);

// Writes serialize_npy(...) to path; throws nibble::Error naming the path when it cannot.
void write_npy(const std::filesystem::path& path, std::span<const int64_t> shape, std::span<const float> data);

}  // namespace nibble
