#pragma once
// The safetensors file format, read-only: parse the header of untrusted bytes, memory-map a file,
// and hand out views of its tensors.
//
// File layout (all integers little-endian):
//   [0, 8)                  uint64 header_bytes
//   [8, 8 + header_bytes)   UTF-8 JSON object: {"__metadata__": {str: str}?,
//                             "<name>": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [b, e]}, ...}
//   [8 + header_bytes, end) the data section; tensor bytes are [b, e) relative to its start,
//                           row-major, C order.
// The header is untrusted: every size and offset is bounded by the file (see parse_safetensors).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace nibble::model {

// Every fixed-width dtype of the safetensors specification. Only F32, F16 and BF16 can be loaded
// as model weights (is_weight_dtype); the others are parsed and size-checked so that a file that
// carries, say, an I64 buffer still opens, and asking for that tensor as a weight names it.
enum class Dtype : uint8_t {
  kBool, kU8, kI8, kF8E5M2, kF8E4M3, kF8E8M0, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64,
  kI64, kU64,
};

const char* dtype_name(Dtype dtype);  // the spelling in the header: "F32", "BF16", ...
int64_t dtype_size(Dtype dtype);      // bytes per element
// The dtype spelled `name` in a header, or nullopt when the specification has no such dtype.
std::optional<Dtype> dtype_from_name(const std::string& name);
bool is_weight_dtype(Dtype dtype);  // F32, F16, BF16

// "[4096, 128]" for messages.
std::string format_shape(std::span<const int64_t> shape);

// One tensor's entry in a header, validated against the file: data_end - data_begin ==
// product(shape) * dtype_size(dtype) and data_end <= the data section's size.
struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;  // row-major; an empty shape is a scalar (one element)
  uint64_t data_begin = 0;     // byte offsets into the data section
  uint64_t data_end = 0;

  uint64_t byte_size() const { return data_end - data_begin; }
  int64_t numel() const;
};

// A parsed header. tensors are sorted by data_begin; no two overlap.
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
  uint64_t data_offset = 0;  // file offset of the data section: 8 + header length
  uint64_t data_size = 0;    // bytes in the data section
};

// Upper bound on the JSON header (the real ones are well under 10 MB even for 1000-tensor shards).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and validates the header of a whole safetensors file held in `file`. `source` names the
// file in messages. Throws nibble::Error naming the problem (and the tensor) when the length
// prefix exceeds the file or kMaxSafetensorsHeaderBytes, the JSON is malformed, a dtype is not
// in the specification, a shape or offset pair is malformed or out of range, the byte size does
// not match the shape, or two tensors overlap.
SafetensorsHeader parse_safetensors(std::span<const std::byte> file, const std::string& source);

// A tensor inside a file: its header entry plus a pointer to its bytes (valid as long as the
// SafetensorsFile that handed it out lives; data may be unaligned for the dtype).
struct TensorView {
  const TensorInfo* info = nullptr;
  const std::byte* data = nullptr;  // info->byte_size() bytes, layout as stored

  const std::string& name() const { return info->name; }
  Dtype dtype() const { return info->dtype; }
  const std::vector<int64_t>& shape() const { return info->shape; }
  uint64_t byte_size() const { return info->byte_size(); }
};

// The bytes of a safetensors file: a read-only memory mapping (or, for parsing a buffer, an owned
// copy). Movable, not copyable; unmaps on destruction.
class MappedBytes {
 public:
  // Maps `path` read-only. Throws nibble::Error naming the file when it cannot be opened or mapped.
  static MappedBytes map_file(const std::filesystem::path& path);
  static MappedBytes copy_of(std::span<const std::byte> bytes);

  MappedBytes() = default;
  MappedBytes(MappedBytes&& other) noexcept;
  MappedBytes& operator=(MappedBytes&& other) noexcept;
  MappedBytes(const MappedBytes&) = delete;
  MappedBytes& operator=(const MappedBytes&) = delete;
  ~MappedBytes();

  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;              // munmap on destruction
  std::vector<std::byte> owned_;     // copy_of
};

// An opened safetensors file: the mapping and its validated header. Tensor views point into the
// mapping, so keep the SafetensorsFile alive (hold it in a shared_ptr) while they are in use.
class SafetensorsFile {
 public:
  // Maps and parses `path`. Throws nibble::Error naming the file on any problem.
  static SafetensorsFile open(const std::filesystem::path& path);
  // Parses bytes already in memory (copied); `source` names them in messages.
  static SafetensorsFile from_bytes(std::span<const std::byte> bytes, const std::string& source);

  const std::string& source() const { return source_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }

  // The tensor called `name`, or nullopt.
  std::optional<TensorView> find(const std::string& name) const;
  // The tensor called `name`; throws nibble::Error naming it and the file when absent.
  TensorView get(const std::string& name) const;

 private:
  SafetensorsFile(MappedBytes bytes, std::string source);

  MappedBytes bytes_;
  std::string source_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in header_.tensors
};

}  // namespace nibble::model
