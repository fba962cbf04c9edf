#include "unit/model_loading/safetensors_writer.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace nibble::model::testing {

namespace {

template <typename T>
void append_le(std::vector<std::byte>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));  // the test host is little-endian like the format
}

[[noreturn]] void not_exact(const char* format, float value) {
  throw std::logic_error(std::string("test value not exactly representable in ") + format + ": " +
                         std::to_string(value));
}

// [u64 header length][header][data]; one allocation of the final size.
std::vector<std::byte> file_bytes(const std::string& header, const std::string& data) {
  std::string all(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(all.data(), &length, 8);  // the test host is little-endian like the format
  all += header;
  all += data;
  std::vector<std::byte> out(all.size());
  std::memcpy(out.data(), all.data(), all.size());
  return out;
}

}  // namespace

uint16_t bf16_bits_exact(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0xFFFFu) != 0) not_exact("bf16", value);
  return static_cast<uint16_t>(bits >> 16);
}

// value = (-1)^s · 2^(E-15) · (1 + M/1024) for normal halves; zero; nothing else is needed here.
uint16_t f16_bits_exact(float value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (magnitude == 0) return sign;
  int exponent = 0;
  const double fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction · 2^exponent
  const int biased = exponent - 1 + 15;                      // 1.xxx · 2^(exponent-1)
  const double mantissa = (fraction * 2 - 1) * 1024;
  if (biased < 1 || biased > 30 || mantissa != std::floor(mantissa)) not_exact("f16", value);
  return static_cast<uint16_t>(sign | (biased << 10) | static_cast<uint16_t>(mantissa));
}

TestTensor make_tensor(std::string name, const std::string& dtype, std::vector<int64_t> shape,
                       const std::vector<float>& values) {
  TestTensor t{.name = std::move(name), .dtype = dtype, .shape = std::move(shape), .bytes = {}};
  for (float v : values) {
    if (dtype == "F32") {
      append_le(t.bytes, v);
    } else if (dtype == "BF16") {
      append_le(t.bytes, bf16_bits_exact(v));
    } else if (dtype == "F16") {
      append_le(t.bytes, f16_bits_exact(v));
    } else {
      throw std::logic_error("make_tensor: unsupported dtype " + dtype);
    }
  }
  return t;
}

std::vector<std::byte> build_safetensors(const std::vector<TestTensor>& tensors,
                                         const WriteOptions& options) {
  nlohmann::json header = nlohmann::json::object();
  if (!options.metadata.empty()) header["__metadata__"] = options.metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while (static_cast<int>(text.size() % 8) != options.header_length_mod8) text.push_back(' ');
  std::string data;
  for (const auto& t : tensors) data.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  return file_bytes(text, data);
}

std::vector<std::byte> build_raw(const std::string& header_json, size_t data_bytes) {
  return file_bytes(header_json, std::string(data_bytes, '\0'));
}

void write_bytes(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::vector<std::byte> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

TempDir::TempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          ("nibble_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace nibble::model::testing
