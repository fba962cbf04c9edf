#pragma once
// Writes safetensors files from tests, independently of the parser under test: a header built with
// nlohmann::json, tensors laid out back to back, values encoded by the test's own F16/BF16 encoders.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace nibble::model::testing {

struct TestTensor {
  std::string name;
  std::string dtype;            // as spelled in the header: "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;  // the stored bytes, little-endian
};

// float32 values encoded as `dtype` ("F32", "BF16" or "F16"). For BF16 and F16 every value must be
// exactly representable (the test's encoders check this and abort otherwise), so the expected
// float32 after conversion is the value itself.
TestTensor make_tensor(std::string name, const std::string& dtype, std::vector<int64_t> shape,
                       const std::vector<float>& values);

// Exact encoders for values representable in the target format (checked; no rounding).
uint16_t bf16_bits_exact(float value);
uint16_t f16_bits_exact(float value);

struct WriteOptions {
  std::map<std::string, std::string> metadata;
  // Header length ≡ header_length_mod8 (mod 8) by padding with spaces; 0 is what the reference
  // writer does (8-byte aligned data). Other values make F32 data misaligned.
  int header_length_mod8 = 0;
};

// The bytes of a safetensors file holding `tensors` back to back in the given order.
std::vector<std::byte> build_safetensors(const std::vector<TestTensor>& tensors,
                                         const WriteOptions& options = {});
// A file from a hand-written header and `data_bytes` zero bytes of data (for malformed headers).
std::vector<std::byte> build_raw(const std::string& header_json, size_t data_bytes);

void write_bytes(const std::filesystem::path& path, const std::vector<std::byte>& bytes);
std::vector<std::byte> read_bytes(const std::filesystem::path& path);

// A fresh empty directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& tag);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace nibble::model::testing
