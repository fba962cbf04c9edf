#include "common/npy.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "common/error.h"

namespace nibble {

static_assert(std::endian::native == std::endian::little, "the .npy reader copies '<f4' data as is");

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;  // kMagic.size(); the string holds no NUL

uint32_t load_le(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string shape_text(std::span<const int64_t> shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) text += shape.size() == 1 ? "," : ", ";
  }
  return text + ")";
}

// A few dtype codes spelled out, so an error says "float64" rather than only "<f8".
std::string describe_dtype(std::string_view descr) {
  const std::string_view kind = descr.size() >= 2 ? descr.substr(1) : descr;
  std::string_view name;
  if (kind == "f2") name = "float16";
  else if (kind == "f4") name = "float32";
  else if (kind == "f8") name = "float64";
  else if (kind == "i1") name = "int8";
  else if (kind == "u1") name = "uint8";
  else if (kind == "i2") name = "int16";
  else if (kind == "i4") name = "int32";
  else if (kind == "i8") name = "int64";
  else if (kind == "b1") name = "bool";
  else if (kind == "V2") name = "bfloat16 stored as raw 2-byte void";
  std::string text = fmt::format("'{}'", descr);
  if (!name.empty()) {
    const bool big_endian = !descr.empty() && descr[0] == '>';
    text += fmt::format(" ({}{})", big_endian ? "big-endian " : "", name);
  }
  return text;
}

// The header dict, a Python literal: {'descr': <str>, 'fortran_order': <bool>, 'shape': <tuple>}
// in any key order, optional trailing comma, then whitespace. Only what NumPy writes is accepted.
struct Header {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
};

class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  Header parse() {
    Header header;
    skip_space();
    expect('{', "the header must start with '{'");
    skip_space();
    while (peek() != '}') {
      const std::string key = parse_string("a quoted key");
      skip_space();
      expect(':', fmt::format("':' after key '{}'", key));
      skip_space();
      if (key == "descr") {
        NIBBLE_CHECK(!header.descr, "malformed .npy header: key 'descr' appears twice");
        header.descr = parse_string("the 'descr' value, a quoted string");
      } else if (key == "fortran_order") {
        NIBBLE_CHECK(!header.fortran_order, "malformed .npy header: key 'fortran_order' appears twice");
        header.fortran_order = parse_bool();
      } else if (key == "shape") {
        NIBBLE_CHECK(!header.shape, "malformed .npy header: key 'shape' appears twice");
        header.shape = parse_shape();
      } else {
        fail(fmt::format("unexpected key '{}' (expected descr, fortran_order, shape)", key));
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else if (peek() != '}') {
        fail("expected ',' or '}' after a value");
      }
    }
    ++pos_;  // '}'
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the closing '}'");
    if (!header.descr) fail("the header has no 'descr' key");
    if (!header.fortran_order) fail("the header has no 'fortran_order' key");
    if (!header.shape) fail("the header has no 'shape' key");
    return header;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    NIBBLE_FAIL("malformed .npy header at byte {} of the header: {}", pos_, what);
  }
  // 0 marks the end of the text (a NUL inside the header is never valid anyway).
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t')) ++pos_;
  }
  void expect(char c, const std::string& what) {
    if (peek() != c) fail(fmt::format("expected {}", what));
    ++pos_;
  }

  std::string parse_string(const char* what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(fmt::format("expected {}", what));
    ++pos_;
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\' || text_[pos_] == '\n') fail("escapes and line breaks are not allowed in strings");
      ++pos_;
    }
    if (pos_ >= text_.size()) fail("unterminated string");
    return std::string(text_.substr(start, pos_++ - start));
  }

  bool parse_bool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail("expected True or False for 'fortran_order'");
  }

  // A tuple of non-negative integers: (), (n,), (a, b), (a, b,).
  std::vector<int64_t> parse_shape() {
    expect('(', "a tuple '(...)' for 'shape'");
    std::vector<int64_t> shape;
    skip_space();
    bool trailing_comma = false;
    while (peek() != ')') {
      if (static_cast<int>(shape.size()) == kNpyMaxDims) fail(fmt::format("more than {} dimensions", kNpyMaxDims));
      shape.push_back(parse_dim());
      skip_space();
      trailing_comma = peek() == ',';
      if (trailing_comma) {
        ++pos_;
        skip_space();
      } else if (peek() != ')') {
        fail("expected ',' or ')' in 'shape'");
      }
    }
    ++pos_;  // ')'
    if (shape.size() == 1 && !trailing_comma) fail("'shape' (n) is not a tuple; a 1-d shape is written (n,)");
    return shape;
  }

  int64_t parse_dim() {
    if (peek() == '-') fail("'shape' has a negative dimension");
    if (peek() < '0' || peek() > '9') fail("expected a non-negative integer in 'shape'");
    int64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      const int digit = peek() - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) fail("a dimension in 'shape' overflows int64");
      value = value * 10 + digit;
      ++pos_;
    }
    return value;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

NpyArray parse_npy(std::span<const uint8_t> bytes) {
  // Preamble: magic, version, header length.
  NIBBLE_CHECK(bytes.size() >= kMagicBytes && std::memcmp(bytes.data(), kMagic.data(), kMagicBytes) == 0,
               "not a .npy file: it does not start with the magic bytes \\x93NUMPY");
  NIBBLE_CHECK(bytes.size() >= kMagicBytes + 2, "truncated .npy file: {} bytes, no version", bytes.size());
  const int major = bytes[6], minor = bytes[7];
  NIBBLE_CHECK((major == 1 || major == 2 || major == 3) && minor == 0,
               "unsupported .npy format version {}.{} (supported: 1.0, 2.0, 3.0)", major, minor);
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t header_start = kMagicBytes + 2 + length_bytes;
  NIBBLE_CHECK(bytes.size() >= header_start, "truncated .npy file: {} bytes, no header length", bytes.size());
  const uint32_t header_bytes = load_le(bytes.data() + 8, static_cast<int>(length_bytes));
  NIBBLE_CHECK(header_bytes <= kNpyMaxHeaderBytes, "the .npy header claims {} bytes (at most {} allowed)",
               header_bytes, kNpyMaxHeaderBytes);
  NIBBLE_CHECK(header_bytes <= bytes.size() - header_start,
               "truncated .npy file: the header claims {} bytes but only {} follow the preamble", header_bytes,
               bytes.size() - header_start);

  // Header dict.
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + header_start), header_bytes);
  const Header header = HeaderParser(text).parse();
  NIBBLE_CHECK(*header.descr == "<f4", "unsupported .npy dtype {}: nibble reads float32 little-endian '<f4' only",
               describe_dtype(*header.descr));
  NIBBLE_CHECK(!*header.fortran_order,
               "Fortran-order (column-major) .npy arrays are not supported; save a C-order array "
               "(numpy.ascontiguousarray)");

  // Data: exactly prod(shape) float32 values; the product is computed with overflow checks.
  const std::vector<int64_t>& shape = *header.shape;
  const size_t data_start = header_start + header_bytes;
  const uint64_t data_bytes = bytes.size() - data_start;
  bool has_zero_dim = false;
  for (int64_t d : shape) has_zero_dim |= d == 0;
  uint64_t numel = has_zero_dim ? 0 : 1, needed_bytes = 0;
  bool overflow = false;
  for (size_t i = 0; i < shape.size() && !has_zero_dim; ++i) {
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(shape[i]), &numel);
  }
  overflow |= __builtin_mul_overflow(numel, uint64_t{sizeof(float)}, &needed_bytes);
  NIBBLE_CHECK(!overflow, "truncated .npy data: shape {} needs more than 2^64 bytes of float32, found {}",
               shape_text(shape), data_bytes);
  NIBBLE_CHECK(needed_bytes == data_bytes, "{} .npy data: shape {} needs {} bytes of float32, found {}",
               needed_bytes > data_bytes ? "truncated" : "trailing bytes after the", shape_text(shape), needed_bytes,
               data_bytes);

  NpyArray array{.shape = shape, .data = std::vector<float>(numel)};
  if (numel > 0) std::memcpy(array.data.data(), bytes.data() + data_start, numel * sizeof(float));
  return array;
}

NpyArray read_npy(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  NIBBLE_CHECK(in, "cannot open '{}' for reading", path.string());
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  NIBBLE_CHECK(!ec, "cannot read the size of '{}': {}", path.string(), ec.message());
  std::vector<uint8_t> bytes(size);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  NIBBLE_CHECK(in.gcount() == static_cast<std::streamsize>(size), "cannot read '{}': got {} of {} bytes",
               path.string(), in.gcount(), size);
  try {
    return parse_npy(bytes);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path.string(), e.what()));
  }
}

std::vector<uint8_t> serialize_npy(std::span<const int64_t> shape, std::span<const float> data) {
  NIBBLE_CHECK(static_cast<int>(shape.size()) <= kNpyMaxDims, "a .npy array has at most {} dimensions, got {}",
               kNpyMaxDims, shape.size());
  uint64_t numel = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    NIBBLE_CHECK(d >= 0, "negative dimension {} in shape {}", d, shape_text(shape));
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
  }
  for (int64_t d : shape) overflow &= d != 0;  // a zero dimension makes the product 0 after all
  NIBBLE_CHECK(!overflow, "shape {} holds more than 2^64 elements, not the {} given", shape_text(shape),
               data.size());
  NIBBLE_CHECK(numel == data.size(), "shape {} holds {} elements but {} were given", shape_text(shape), numel,
               data.size());

  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': {}, }}", shape_text(shape));
  // Pad with spaces and end with '\n' so that preamble + header is a multiple of 64 bytes.
  const bool version2 = header.size() + 1 + 10 > 65535;
  const size_t preamble = version2 ? 12 : 10;
  const size_t total = (preamble + header.size() + 1 + 63) / 64 * 64;
  header.append(total - preamble - header.size() - 1, ' ');
  header.push_back('\n');

  std::vector<uint8_t> bytes(kMagic.begin(), kMagic.end());
  bytes.push_back(version2 ? 2 : 1);
  bytes.push_back(0);
  const uint32_t header_bytes = static_cast<uint32_t>(header.size());
  for (size_t i = 0; i < (version2 ? 4u : 2u); ++i) bytes.push_back(static_cast<uint8_t>(header_bytes >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  const auto* raw = reinterpret_cast<const uint8_t*>(data.data());
  bytes.insert(bytes.end(), raw, raw + data.size_bytes());
  return bytes;
}

void write_npy(const std::filesystem::path& path, std::span<const int64_t> shape, std::span<const float> data) {
  const std::vector<uint8_t> bytes = serialize_npy(shape, data);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  NIBBLE_CHECK(out, "cannot open '{}' for writing", path.string());
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  NIBBLE_CHECK(out, "cannot write {} bytes to '{}'", bytes.size(), path.string());
}

}  // namespace nibble
