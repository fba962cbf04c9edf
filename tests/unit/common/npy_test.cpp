// float32 .npy reading and writing (common/npy.h). Inputs are built byte by byte here from the
// NumPy format specification (numpy/lib/format.py), not with serialize_npy, so the reader is
// checked against the format rather than against the writer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/npy.h"
#include "support/expect_error.h"

namespace nibble {
namespace {

using test_support::expect_error;

std::vector<uint8_t> float_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());  // little-endian host
  return bytes;
}

// magic, version major.minor, header length (uint16 LE for 1.x, uint32 LE otherwise), header, data.
std::vector<uint8_t> npy_file(int major, int minor, const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> file = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), static_cast<uint8_t>(minor)};
  const size_t length_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < length_bytes; ++i) file.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  file.insert(file.end(), header.begin(), header.end());
  file.insert(file.end(), data.begin(), data.end());
  return file;
}

std::string header_for(const std::string& shape, const std::string& descr = "<f4", const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }\n";
}

NpyArray parse(const std::vector<uint8_t>& bytes) { return parse_npy(bytes); }

TEST(Npy, ParsesEveryVersion) {
  const std::vector<float> values = {1.5f, -2.0f, 0.0f, 3.25f, 1e-30f, -7.0f};
  for (int major : {1, 2, 3}) {
    const NpyArray a = parse(npy_file(major, 0, header_for("(2, 3)"), float_bytes(values)));
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3})) << "version " << major;
    EXPECT_EQ(a.data, values) << "version " << major;
    EXPECT_EQ(a.numel(), 6);
  }
}

TEST(Npy, AcceptsEveryWayNumPySpellsTheHeader) {
  const std::vector<uint8_t> data = float_bytes({1, 2, 3, 4});
  const char* headers[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
      "{'descr':'<f4','fortran_order':False,'shape':(4,)}",
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (4,)}",
      "{'shape': (4,), 'fortran_order': False, 'descr': '<f4'}   \n",
      "  {'descr': '<f4', 'fortran_order': False, 'shape': ( 4 , ) , }                                    \n",
  };
  for (const char* h : headers) {
    const NpyArray a = parse(npy_file(1, 0, h, data));
    EXPECT_EQ(a.shape, (std::vector<int64_t>{4})) << h;
    EXPECT_EQ(a.data, (std::vector<float>{1, 2, 3, 4})) << h;
  }
  EXPECT_EQ(parse(npy_file(1, 0, header_for("(2, 2,)"), data)).shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(parse(npy_file(1, 0, header_for("(1, 1, 4)"), data)).shape, (std::vector<int64_t>{1, 1, 4}));
}

TEST(Npy, ScalarsAndEmptyArrays) {
  const NpyArray scalar = parse(npy_file(1, 0, header_for("()"), float_bytes({42.0f})));
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.data, std::vector<float>{42.0f});
  const NpyArray empty = parse(npy_file(1, 0, header_for("(0, 16)"), {}));
  EXPECT_EQ(empty.shape, (std::vector<int64_t>{0, 16}));
  EXPECT_TRUE(empty.data.empty());
  // A zero anywhere makes the product zero, whatever the other dimensions are.
  EXPECT_EQ(parse(npy_file(1, 0, header_for("(4611686018427387904, 0)"), {})).numel(), 0);
}

TEST(Npy, SerializeWritesWhatNumPyWrites) {
  // np.save of a (2, 3) float32 array: version 1.0, header length 118 (0x76), the dict, spaces,
  // '\n', data at byte 128.
  const std::vector<int64_t> shape = {2, 3};
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  const std::vector<uint8_t> bytes = serialize_npy(shape, values);
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string header = dict + std::string(118 - dict.size() - 1, ' ') + "\n";
  EXPECT_EQ(bytes, npy_file(1, 0, header, float_bytes(values)));
  EXPECT_EQ(bytes.size(), 128u + 24u);

  // 1-d shapes carry the tuple's trailing comma; 0-d shapes are ().
  const std::vector<uint8_t> one_d = serialize_npy(std::vector<int64_t>{3}, std::vector<float>{1, 2, 3});
  EXPECT_NE(std::string(one_d.begin(), one_d.end()).find("'shape': (3,), }"), std::string::npos);
  const std::vector<uint8_t> zero_d = serialize_npy({}, std::vector<float>{1});
  EXPECT_NE(std::string(zero_d.begin(), zero_d.end()).find("'shape': (), }"), std::string::npos);
  EXPECT_EQ((one_d.size() - 3 * 4) % 64, 0u);  // data starts on a 64-byte boundary
  EXPECT_EQ((zero_d.size() - 1 * 4) % 64, 0u);
}

TEST(Npy, RoundTripIsBitExactIncludingNonFiniteValues) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> any_bits;
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {7}, {2, 3}, {3, 1, 16}, {2, 0, 5}, {1, 1, 1, 1, 33}};
  for (const auto& shape : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> values(n);
    for (float& v : values) {
      const uint32_t u = any_bits(rng);
      std::memcpy(&v, &u, 4);  // any pattern, NaN payloads included
    }
    const std::vector<uint8_t> bytes = serialize_npy(shape, values);
    EXPECT_EQ((bytes.size() - values.size() * 4) % 64, 0u) << "data starts on a 64-byte boundary";
    const NpyArray a = parse_npy(bytes);
    EXPECT_EQ(a.shape, shape);
    ASSERT_EQ(a.data.size(), values.size());
    if (!values.empty()) EXPECT_EQ(std::memcmp(a.data.data(), values.data(), values.size() * 4), 0);
  }
}

TEST(Npy, WriteThenReadAFile) {
  const std::filesystem::path dir = std::filesystem::path(NIBBLE_BINARY_DIR) / "tests/unit/common/npy_test_files";
  std::filesystem::create_directories(dir);
  const std::vector<int64_t> shape = {4, 16};
  std::vector<float> values(64);
  for (int i = 0; i < 64; ++i) values[i] = static_cast<float>(i) * 0.125f - 3.0f;
  write_npy(dir / "a.npy", shape, values);
  const NpyArray a = read_npy(dir / "a.npy");
  EXPECT_EQ(a.shape, shape);
  EXPECT_EQ(a.data, values);
  expect_error([&] { read_npy(dir / "missing.npy"); }, "missing.npy");
  expect_error([&] { write_npy(dir / "no_such_dir" / "b.npy", shape, values); }, "cannot open");
  // A parse error names the file.
  std::FILE* f = std::fopen((dir / "junk.npy").c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fputs("not numpy", f);
  std::fclose(f);
  expect_error([&] { read_npy(dir / "junk.npy"); }, "junk.npy: not a .npy file");
}

TEST(Npy, RejectsWrongMagicAndVersions) {
  const std::vector<uint8_t> good = npy_file(1, 0, header_for("(1,)"), float_bytes({1}));
  expect_error([] { parse({}); }, "magic");
  std::vector<uint8_t> bad = good;
  bad[0] = 0x92;
  expect_error([&] { parse(bad); }, "magic");
  bad = good;
  bad[1] = 'n';
  expect_error([&] { parse(bad); }, "magic");
  expect_error([&] { parse(std::vector<uint8_t>(good.begin(), good.begin() + 7)); }, "no version");
  expect_error([&] { parse(npy_file(4, 0, header_for("(1,)"), float_bytes({1}))); }, "version 4.0");
  expect_error([&] { parse(npy_file(1, 1, header_for("(1,)"), float_bytes({1}))); }, "version 1.1");
  expect_error([&] { parse(npy_file(0, 0, header_for("(1,)"), float_bytes({1}))); }, "version 0.0");
}

TEST(Npy, RejectsHeaderLengthsPastTheFile) {
  const std::vector<uint8_t> good = npy_file(1, 0, header_for("(1,)"), float_bytes({1}));
  expect_error([&] { parse(std::vector<uint8_t>(good.begin(), good.begin() + 9)); }, "no header length");
  expect_error([&] { parse(std::vector<uint8_t>(good.begin(), good.begin() + 30)); }, "header claims");
  std::vector<uint8_t> v2 = npy_file(2, 0, header_for("(1,)"), float_bytes({1}));
  v2[11] = 0x7F;  // header length ~2^31
  expect_error([&] { parse(v2); }, "at most");
  v2[11] = 0x00;
  v2[10] = 0x01;  // 65536 + real length: past the end of the file
  expect_error([&] { parse(v2); }, "header claims");
}

TEST(Npy, RejectsOtherDtypesNamingThem) {
  const std::vector<uint8_t> data = float_bytes({1, 2});
  const struct {
    const char* descr;
    const char* message;
  } cases[] = {{"<f8", "'<f8' (float64)"}, {"<f2", "'<f2' (float16)"}, {">f4", "'>f4' (big-endian float32)"},
               {"<i4", "'<i4' (int32)"},   {"|u1", "'|u1' (uint8)"},   {"|b1", "'|b1' (bool)"},
               {"<c8", "'<c8'"},           {"", "''"}};
  for (const auto& c : cases) {
    expect_error([&] { parse(npy_file(1, 0, header_for("(2,)", c.descr), data)); }, c.message);
    expect_error([&] { parse(npy_file(1, 0, header_for("(2,)", c.descr), data)); }, "unsupported .npy dtype");
  }
}

TEST(Npy, RejectsFortranOrder) {
  expect_error([] { parse(npy_file(1, 0, header_for("(2, 2)", "<f4", "True"), float_bytes({1, 2, 3, 4}))); },
               "Fortran-order");
}

TEST(Npy, RejectsMalformedHeaders) {
  const std::vector<uint8_t> data = float_bytes({1, 2});
  const struct {
    std::string header;
    const char* message;
  } cases[] = {
      {"", "must start with '{'"},
      {"'descr': '<f4'}", "must start with '{'"},
      {"{'descr': '<f4', 'fortran_order': False}", "no 'shape' key"},
      {"{'shape': (2,), 'fortran_order': False}", "no 'descr' key"},
      {"{'shape': (2,), 'descr': '<f4'}", "no 'fortran_order' key"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", "'descr' appears twice"},
      {"{'descr': '<f4', 'fortran_order': False, 'fortran_order': False, 'shape': (2,)}", "appears twice"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (2,)}", "'shape' appears twice"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", "unexpected key 'extra'"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), ", "expected a quoted key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", "after the closing '}'"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", "expected ',' or '}'"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", "expected ':'"},
      {"{'descr': <f4, 'fortran_order': False, 'shape': (2,)}", "'descr' value"},
      {"{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}", "True or False"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", "True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", "a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", "is not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 1)}", "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", "negative dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,)}", "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (x,)}", "non-negative integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "overflows int64"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2", "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,", "non-negative integer"},
      {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}", "escapes"},
      {"{'descr': '<f4", "unterminated string"},
      {std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}") + '\0', "after the closing '}'"},
  };
  for (const auto& c : cases) {
    expect_error([&] { parse(npy_file(1, 0, c.header, data)); }, c.message);
    expect_error([&] { parse(npy_file(1, 0, c.header, data)); }, "malformed .npy header");
  }
  // More dimensions than NumPy allows.
  std::string many = "(";
  for (int i = 0; i <= kNpyMaxDims; ++i) many += "1, ";
  expect_error([&] { parse(npy_file(1, 0, header_for(many + ")"), data)); }, "more than 64 dimensions");
}

TEST(Npy, RejectsDataThatDoesNotMatchTheShape) {
  const std::vector<uint8_t> six = float_bytes({1, 2, 3, 4, 5, 6});
  expect_error([&] { parse(npy_file(1, 0, header_for("(2, 4)"), six)); }, "truncated .npy data: shape (2, 4) needs 32");
  expect_error([&] { parse(npy_file(1, 0, header_for("(5,)"), six)); }, "trailing bytes after the .npy data");
  std::vector<uint8_t> ragged = six;
  ragged.pop_back();  // 23 bytes: not even whole floats
  expect_error([&] { parse(npy_file(1, 0, header_for("(2, 3)"), ragged)); }, "truncated");
  // A product that overflows 64 bits must be caught before it wraps around to a small number.
  expect_error([&] { parse(npy_file(1, 0, header_for("(4294967296, 4294967296, 4)"), six)); }, "more than 2^64 bytes");
  expect_error([&] { parse(npy_file(1, 0, header_for("(9223372036854775807,)"), six)); }, "more than 2^64 bytes");
  expect_error([&] { parse(npy_file(1, 0, header_for("()"), {})); }, "truncated");
}

TEST(Npy, SerializeRejectsShapeDataMismatch) {
  expect_error([] { serialize_npy(std::vector<int64_t>{2, 3}, std::vector<float>(5)); }, "shape (2, 3) holds 6 elements but 5");
  expect_error([] { serialize_npy(std::vector<int64_t>{2, -3}, std::vector<float>(6)); }, "negative dimension -3");
  expect_error([] { serialize_npy(std::vector<int64_t>{1LL << 40, 1LL << 40, 1LL << 40}, std::vector<float>(6)); },
               "more than 2^64 elements, not the 6 given");
}

}  // namespace
}  // namespace nibble
