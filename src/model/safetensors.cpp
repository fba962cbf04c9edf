#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string_view>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace nibble::model {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; nibble reads it in place");

namespace {

struct DtypeEntry {
  Dtype dtype;
  const char* name;
  int64_t size;
};

// The specification's fixed-width dtypes (sub-byte packed ones such as F4 are not listed: their
// byte size is not shape × element size, and no supported model stores them).
constexpr std::array<DtypeEntry, 16> kDtypes = {{
    {Dtype::kBool, "BOOL", 1},      {Dtype::kU8, "U8", 1},           {Dtype::kI8, "I8", 1},
    {Dtype::kF8E5M2, "F8_E5M2", 1}, {Dtype::kF8E4M3, "F8_E4M3", 1},  {Dtype::kF8E8M0, "F8_E8M0", 1},
    {Dtype::kI16, "I16", 2},        {Dtype::kU16, "U16", 2},         {Dtype::kF16, "F16", 2},
    {Dtype::kBF16, "BF16", 2},      {Dtype::kI32, "I32", 4},         {Dtype::kU32, "U32", 4},
    {Dtype::kF32, "F32", 4},        {Dtype::kF64, "F64", 8},         {Dtype::kI64, "I64", 8},
    {Dtype::kU64, "U64", 8},
}};

const DtypeEntry& dtype_entry(Dtype dtype) {
  for (const auto& e : kDtypes)
    if (e.dtype == dtype) return e;
  NIBBLE_ASSERT(false);
  return kDtypes[0];
}

uint64_t read_u64_le(const std::byte* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A value for a message: scalars verbatim (cut when long), containers by kind and size only —
// dumping an attacker's nested array would recurse as deep as it nests.
std::string excerpt(const nlohmann::json& value) {
  if (value.is_array()) return fmt::format("an array of {} elements", value.size());
  if (value.is_object()) return fmt::format("an object of {} entries", value.size());
  std::string text = value.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// A tensor name for a message, cut when an untrusted header makes it huge.
std::string display_name(const std::string& name) {
  return name.size() > 200 ? name.substr(0, 197) + "..." : name;
}

TensorInfo parse_tensor_entry(const std::string& key, const nlohmann::json& entry,
                              uint64_t data_size, const std::string& source) {
  const std::string name = display_name(key);
  NIBBLE_CHECK(entry.is_object(), "{}: tensor '{}': header entry is not a JSON object but {}",
               source, name, excerpt(entry));
  TensorInfo info;
  info.name = key;

  const auto dtype_it = entry.find("dtype");
  NIBBLE_CHECK(dtype_it != entry.end() && dtype_it->is_string(),
               "{}: tensor '{}': missing or non-string \"dtype\"", source, name);
  const auto dtype = dtype_from_name(dtype_it->get<std::string>());
  NIBBLE_CHECK(dtype.has_value(), "{}: tensor '{}': unknown dtype {}", source, name,
               excerpt(*dtype_it));
  info.dtype = *dtype;

  const auto shape_it = entry.find("shape");
  NIBBLE_CHECK(shape_it != entry.end() && shape_it->is_array(),
               "{}: tensor '{}': missing or non-array \"shape\"", source, name);
  // Element count with overflow checks; each dimension fits int64 and the product is bounded by
  // the data section below, so numel() and byte sizes never wrap.
  uint64_t numel = 1;
  for (const auto& dim : *shape_it) {
    NIBBLE_CHECK(dim.is_number_unsigned(),
                 "{}: tensor '{}': shape entry {} is {}, not a non-negative integer", source,
                 name, info.shape.size(), excerpt(dim));
    const uint64_t d = dim.get<uint64_t>();
    NIBBLE_CHECK(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                     !__builtin_mul_overflow(numel, d, &numel),
                 "{}: tensor '{}': shape overflows 64 bits at entry {} ({})", source, name,
                 info.shape.size(), d);
    info.shape.push_back(static_cast<int64_t>(d));
  }
  uint64_t expected_bytes = 0;
  NIBBLE_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(info.dtype)),
                                       &expected_bytes),
               "{}: tensor '{}': {} {} overflows 64 bits of bytes", source, name,
               dtype_name(info.dtype), format_shape(info.shape));

  const auto offsets_it = entry.find("data_offsets");
  NIBBLE_CHECK(offsets_it != entry.end() && offsets_it->is_array() && offsets_it->size() == 2 &&
                   (*offsets_it)[0].is_number_unsigned() && (*offsets_it)[1].is_number_unsigned(),
               "{}: tensor '{}': \"data_offsets\" must be two non-negative integers, got {}",
               source, name, offsets_it == entry.end() ? "nothing" : excerpt(*offsets_it));
  info.data_begin = (*offsets_it)[0].get<uint64_t>();
  info.data_end = (*offsets_it)[1].get<uint64_t>();
  NIBBLE_CHECK(info.data_begin <= info.data_end && info.data_end <= data_size,
               "{}: tensor '{}': data_offsets [{}, {}] out of range (data section holds {} bytes)",
               source, name, info.data_begin, info.data_end, data_size);
  NIBBLE_CHECK(info.byte_size() == expected_bytes,
               "{}: tensor '{}': {} {} needs {} bytes but data_offsets [{}, {}] span {}", source,
               name, dtype_name(info.dtype), format_shape(info.shape), expected_bytes,
               info.data_begin, info.data_end, info.byte_size());
  return info;
}

}  // namespace

const char* dtype_name(Dtype dtype) { return dtype_entry(dtype).name; }

int64_t dtype_size(Dtype dtype) { return dtype_entry(dtype).size; }

std::optional<Dtype> dtype_from_name(const std::string& name) {
  for (const auto& e : kDtypes)
    if (name == e.name) return e.dtype;
  return std::nullopt;
}

bool is_weight_dtype(Dtype dtype) {
  return dtype == Dtype::kF32 || dtype == Dtype::kF16 || dtype == Dtype::kBF16;
}

std::string format_shape(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // bounded by the file size at parse time
  return n;
}

SafetensorsHeader parse_safetensors(std::span<const std::byte> file, const std::string& source) {
  NIBBLE_CHECK(file.size() >= 8,
               "{}: truncated safetensors file: {} bytes, fewer than the 8-byte header length",
               source, file.size());
  const uint64_t header_bytes = read_u64_le(file.data());
  const uint64_t available = file.size() - 8;
  NIBBLE_CHECK(header_bytes <= available,
               "{}: safetensors header length {} exceeds the {} bytes after the length prefix "
               "(truncated or not a safetensors file)",
               source, header_bytes, available);
  NIBBLE_CHECK(header_bytes <= kMaxSafetensorsHeaderBytes,
               "{}: safetensors header length {} exceeds the limit of {} bytes", source,
               header_bytes, kMaxSafetensorsHeaderBytes);

  SafetensorsHeader header;
  header.data_offset = 8 + header_bytes;
  header.data_size = available - header_bytes;

  const auto* text = reinterpret_cast<const char*>(file.data() + 8);
  nlohmann::json json = nlohmann::json::parse(text, text + header_bytes, nullptr,
                                              /*allow_exceptions=*/false);
  NIBBLE_CHECK(!json.is_discarded(), "{}: safetensors header ({} bytes) is not valid JSON", source,
               header_bytes);
  NIBBLE_CHECK(json.is_object(), "{}: safetensors header is not a JSON object", source);

  for (const auto& [key, value] : json.items()) {
    if (key == "__metadata__") {
      NIBBLE_CHECK(value.is_object(), "{}: \"__metadata__\" is not a JSON object", source);
      for (const auto& [mkey, mvalue] : value.items()) {
        NIBBLE_CHECK(mvalue.is_string(), "{}: \"__metadata__\" entry '{}' is not a string",
                     source, display_name(mkey));
        header.metadata.emplace(mkey, mvalue.get<std::string>());
      }
      continue;
    }
    header.tensors.push_back(parse_tensor_entry(key, value, header.data_size, source));
  }

  // No two tensors may share bytes. Sorted by (begin, end), each must start at or after the end of
  // the one before; a zero-byte tensor never overlaps anything at its own offset.
  std::sort(header.tensors.begin(), header.tensors.end(), [](const auto& a, const auto& b) {
    return std::tie(a.data_begin, a.data_end, a.name) < std::tie(b.data_begin, b.data_end, b.name);
  });
  const TensorInfo* previous = nullptr;
  for (const auto& t : header.tensors) {
    if (t.byte_size() == 0) continue;
    if (previous != nullptr)
      NIBBLE_CHECK(t.data_begin >= previous->data_end,
                   "{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", source,
                   display_name(previous->name), previous->data_begin, previous->data_end,
                   display_name(t.name), t.data_begin, t.data_end);
    previous = &t;
  }
  return header;
}

// ---- MappedBytes -------------------------------------------------------------------------------

MappedBytes MappedBytes::map_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  NIBBLE_CHECK(fd >= 0, "cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    NIBBLE_FAIL("cannot stat {}: {}", path.string(), std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    NIBBLE_FAIL("{} is not a regular file", path.string());
  }
  MappedBytes out;
  out.size_ = static_cast<size_t>(st.st_size);
  if (out.size_ > 0) {  // mmap of 0 bytes fails; an empty file is reported by the parser
    void* p = ::mmap(nullptr, out.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    NIBBLE_CHECK(p != MAP_FAILED, "cannot memory-map {} ({} bytes): {}", path.string(), out.size_,
                 std::strerror(err));
    out.data_ = static_cast<const std::byte*>(p);
    out.mapped_ = true;
  } else {
    ::close(fd);
  }
  return out;
}

MappedBytes MappedBytes::copy_of(std::span<const std::byte> bytes) {
  MappedBytes out;
  out.owned_.assign(bytes.begin(), bytes.end());
  out.data_ = out.owned_.data();
  out.size_ = out.owned_.size();
  return out;
}

MappedBytes::MappedBytes(MappedBytes&& other) noexcept { *this = std::move(other); }

MappedBytes& MappedBytes::operator=(MappedBytes&& other) noexcept {
  if (this == &other) return *this;
  if (mapped_) ::munmap(const_cast<std::byte*>(data_), size_);
  owned_ = std::move(other.owned_);  // a moved vector keeps its buffer, so data_ stays valid
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  mapped_ = std::exchange(other.mapped_, false);
  return *this;
}

MappedBytes::~MappedBytes() {
  if (mapped_) ::munmap(const_cast<std::byte*>(data_), size_);
}

// ---- SafetensorsFile ---------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(MappedBytes bytes, std::string source)
    : bytes_(std::move(bytes)), source_(std::move(source)) {
  header_ = parse_safetensors(bytes_.bytes(), source_);
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_.emplace(header_.tensors[i].name, i);
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  return SafetensorsFile(MappedBytes::map_file(path), path.string());
}

SafetensorsFile SafetensorsFile::from_bytes(std::span<const std::byte> bytes,
                                            const std::string& source) {
  return SafetensorsFile(MappedBytes::copy_of(bytes), source);
}

std::optional<TensorView> SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  const TensorInfo& info = header_.tensors[it->second];
  return TensorView{.info = &info,
                    .data = bytes_.bytes().data() + header_.data_offset + info.data_begin};
}

TensorView SafetensorsFile::get(const std::string& name) const {
  const auto view = find(name);
  NIBBLE_CHECK(view.has_value(), "{}: no tensor '{}'", source_, name);
  return *view;
}

}  // namespace nibble::model
