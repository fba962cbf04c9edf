// The safetensors parser: valid files (hand-built and the real stories260k file) and every way an
// untrusted header can be wrong.
#include "model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "unit/model_loading/safetensors_writer.h"

namespace nibble::model {
namespace {

using ::testing::HasSubstr;
using testing::build_raw;
using testing::build_safetensors;
using testing::make_tensor;

const std::filesystem::path kStories = std::filesystem::path(NIBBLE_SOURCE_DIR) / "models/stories260k";

// The message of the nibble::Error that parsing `bytes` throws ("" when it does not throw).
std::string parse_error(const std::vector<std::byte>& bytes) {
  try {
    parse_safetensors(bytes, "test.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A header with one tensor entry given as JSON text, and `data_bytes` bytes of data.
std::string one_tensor_error(const std::string& entry, size_t data_bytes) {
  return parse_error(build_raw(R"({"t":)" + entry + "}", data_bytes));
}

TEST(Safetensors, ParsesTensorsInDataOrderWithMetadata) {
  const auto bytes = build_safetensors(
      {make_tensor("b", "F32", {2, 3}, {1, 2, 3, 4, 5, 6}), make_tensor("a", "BF16", {4}, {1, -1, 2, -2}),
       make_tensor("scalar", "F16", {}, {0.5f})},
      {.metadata = {{"format", "pt"}}});
  const SafetensorsHeader h = parse_safetensors(bytes, "mem");
  ASSERT_EQ(h.tensors.size(), 3u);
  // Written back to back: b [0,24), a [24,32), scalar [32,34); sorted by offset, not by name.
  EXPECT_EQ(h.tensors[0].name, "b");
  EXPECT_EQ(h.tensors[0].dtype, Dtype::kF32);
  EXPECT_EQ(h.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.tensors[0].data_begin, 0u);
  EXPECT_EQ(h.tensors[0].data_end, 24u);
  EXPECT_EQ(h.tensors[1].name, "a");
  EXPECT_EQ(h.tensors[1].dtype, Dtype::kBF16);
  EXPECT_EQ(h.tensors[1].data_begin, 24u);
  EXPECT_EQ(h.tensors[2].name, "scalar");
  EXPECT_TRUE(h.tensors[2].shape.empty());
  EXPECT_EQ(h.tensors[2].numel(), 1);
  EXPECT_EQ(h.tensors[2].byte_size(), 2u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(h.data_offset, 8 + header_len);
  EXPECT_EQ(h.data_size, 34u);
}

TEST(Safetensors, ViewsPointAtTheTensorBytes) {
  const auto bytes = build_safetensors({make_tensor("x", "F32", {3}, {1.5f, -2.0f, 0.25f}),
                                        make_tensor("y", "F32", {2}, {7.0f, 8.0f})});
  const auto file = SafetensorsFile::from_bytes(bytes, "mem");
  const TensorView y = file.get("y");
  float values[2];
  std::memcpy(values, y.data, sizeof values);
  EXPECT_EQ(values[0], 7.0f);
  EXPECT_EQ(values[1], 8.0f);
  EXPECT_FALSE(file.find("z").has_value());
  EXPECT_THAT([&] { file.get("z"); }, ::testing::ThrowsMessage<Error>(HasSubstr("no tensor 'z'")));
}

TEST(Safetensors, OtherSpecDtypesParseButAreNotWeights) {
  const auto bytes = build_raw(
      R"({"ids":{"dtype":"I64","shape":[3],"data_offsets":[0,24]},
          "mask":{"dtype":"BOOL","shape":[2,2],"data_offsets":[24,28]},
          "fp8":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[28,32]}})",
      32);
  const auto h = parse_safetensors(bytes, "mem");
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].dtype, Dtype::kI64);
  EXPECT_FALSE(is_weight_dtype(Dtype::kI64));
  EXPECT_FALSE(is_weight_dtype(Dtype::kF8E4M3));
  EXPECT_TRUE(is_weight_dtype(Dtype::kBF16));
  EXPECT_EQ(dtype_size(Dtype::kF64), 8);
  EXPECT_EQ(dtype_from_name("F8_E5M2"), Dtype::kF8E5M2);
  EXPECT_FALSE(dtype_from_name("F4").has_value());
}

TEST(Safetensors, ZeroSizedTensorsAndAnEmptyHeaderObject) {
  EXPECT_EQ(parse_safetensors(build_raw("{}", 0), "mem").tensors.size(), 0u);
  const auto h = parse_safetensors(
      build_raw(R"({"e":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},
                    "x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                8),
      "mem");
  EXPECT_EQ(h.tensors.size(), 2u);
}

TEST(Safetensors, TruncatedFiles) {
  EXPECT_THAT(parse_error({}), HasSubstr("truncated safetensors file: 0 bytes"));
  EXPECT_THAT(parse_error(std::vector<std::byte>(7)), HasSubstr("truncated"));
  // A valid file cut inside its data: the last tensor's offsets now run past the data section.
  auto bytes = build_safetensors({make_tensor("x", "F32", {4}, {1, 2, 3, 4})});
  bytes.resize(bytes.size() - 3);
  EXPECT_THAT(parse_error(bytes),
              HasSubstr("tensor 'x': data_offsets [0, 16] out of range (data section holds 13 bytes)"));
  // Cut inside its header.
  bytes.resize(20);
  EXPECT_THAT(parse_error(bytes), HasSubstr("exceeds the 12 bytes after the length prefix"));
}

TEST(Safetensors, HeaderLengthBeyondFileOrLimit) {
  auto bytes = build_raw("{}", 0);
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  std::memcpy(bytes.data(), &huge, 8);
  EXPECT_THAT(parse_error(bytes), HasSubstr("header length 18446744073709551615 exceeds the 2 bytes"));

  // A file larger than the limit whose header claims more than 100 MB.
  std::vector<std::byte> big(8 + kMaxSafetensorsHeaderBytes + 16, std::byte{' '});
  const uint64_t over = kMaxSafetensorsHeaderBytes + 1;
  std::memcpy(big.data(), &over, 8);
  EXPECT_THAT(parse_error(big), HasSubstr("exceeds the limit of 104857600 bytes"));
}

TEST(Safetensors, MalformedJson) {
  EXPECT_THAT(parse_error(build_raw(R"({"t": {"dtype": "F32",)", 0)), HasSubstr("is not valid JSON"));
  EXPECT_THAT(parse_error(build_raw("[1, 2]", 0)), HasSubstr("is not a JSON object"));
  EXPECT_THAT(parse_error(build_raw("{\"t\": 5}", 0)),
              HasSubstr("tensor 't': header entry is not a JSON object but 5"));
  EXPECT_THAT(parse_error(build_raw(R"({"__metadata__": {"k": 1}})", 0)),
              HasSubstr("\"__metadata__\" entry 'k' is not a string"));
  EXPECT_THAT(parse_error(build_raw(R"({"__metadata__": [1]})", 0)),
              HasSubstr("\"__metadata__\" is not a JSON object"));
  // Invalid UTF-8 inside a string.
  EXPECT_THAT(parse_error(build_raw("{\"\xff\": 1}", 0)), HasSubstr("is not valid JSON"));
}

TEST(Safetensors, BadDtypeShapeOrOffsetsNameTheTensor) {
  EXPECT_THAT(one_tensor_error(R"({"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]})", 1),
              HasSubstr("tensor 't': unknown dtype \"Q4_K\""));
  EXPECT_THAT(one_tensor_error(R"({"shape":[1],"data_offsets":[0,4]})", 4),
              HasSubstr("tensor 't': missing or non-string \"dtype\""));
  EXPECT_THAT(one_tensor_error(R"({"dtype":"F32","shape":5,"data_offsets":[0,4]})", 4),
              HasSubstr("tensor 't': missing or non-array \"shape\""));
  EXPECT_THAT(one_tensor_error(R"({"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]})", 4),
              HasSubstr("tensor 't': shape entry 1 is -1, not a non-negative integer"));
  EXPECT_THAT(one_tensor_error(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})", 4),
              HasSubstr("shape entry 0 is 1.5"));
  EXPECT_THAT(one_tensor_error(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})", 4),
              HasSubstr("tensor 't': shape overflows 64 bits at entry 1"));
  // numel fits, bytes do not: 2^62 elements × 4 bytes.
  EXPECT_THAT(one_tensor_error(R"({"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]})", 4),
              HasSubstr("overflows 64 bits of bytes"));
  EXPECT_THAT(one_tensor_error(R"({"dtype":"F32","shape":[1]})", 4),
              HasSubstr("\"data_offsets\" must be two non-negative integers, got nothing"));
  EXPECT_THAT(one_tensor_error(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,8]})", 8),
              HasSubstr("must be two non-negative integers, got an array of 3 elements"));
  EXPECT_THAT(one_tensor_error(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})", 8),
              HasSubstr("must be two non-negative integers"));
  EXPECT_THAT(one_tensor_error(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})", 8),
              HasSubstr("tensor 't': data_offsets [8, 4] out of range"));
  EXPECT_THAT(one_tensor_error(R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})", 6),
              HasSubstr("tensor 't': data_offsets [4, 8] out of range (data section holds 6 bytes)"));
  EXPECT_THAT(one_tensor_error(R"({"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]})", 6),
              HasSubstr("out of range"));
  EXPECT_THAT(one_tensor_error(R"({"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]})", 16),
              HasSubstr("tensor 't': BF16 [2, 3] needs 12 bytes but data_offsets [0, 8] span 8"));
}

TEST(Safetensors, OverlappingTensors) {
  EXPECT_THAT(parse_error(build_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                         "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                    12)),
              HasSubstr("tensors 'a' [0, 8) and 'b' [4, 12) overlap"));
  // Identical ranges overlap too.
  EXPECT_THAT(parse_error(build_raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                                         "b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                                    4)),
              HasSubstr("overlap"));
  // One inside another.
  EXPECT_THAT(parse_error(build_raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},
                                         "b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                    16)),
              HasSubstr("overlap"));
}

TEST(Safetensors, MapsARealFile) {
  const auto file = SafetensorsFile::open(kStories / "model.safetensors");
  EXPECT_EQ(file.tensors().size(), 47u);  // 1 embedding + 5 layers × 9 + final norm; no lm_head
  EXPECT_EQ(file.header().metadata.at("format"), "pt");
  const TensorView embed = file.get("model.embed_tokens.weight");
  EXPECT_EQ(embed.dtype(), Dtype::kF32);
  EXPECT_EQ(embed.shape(), (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(file.get("model.layers.4.mlp.down_proj.weight").shape(), (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(file.get("model.layers.0.self_attn.k_proj.weight").shape(), (std::vector<int64_t>{32, 64}));

  // Independent read: the 8-byte length, then the tensor's offsets from the JSON, then the floats
  // straight from the file with ifstream.
  std::ifstream in(kStories / "model.safetensors", std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header_text(header_len, '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(header_len));
  const auto header = nlohmann::json::parse(header_text);
  for (const char* name : {"model.embed_tokens.weight", "model.layers.3.self_attn.v_proj.weight", "model.norm.weight"}) {
    const uint64_t begin = header[name]["data_offsets"][0];
    float expected[4];
    in.seekg(static_cast<std::streamoff>(8 + header_len + begin));
    in.read(reinterpret_cast<char*>(expected), sizeof expected);
    const TensorView view = file.get(name);
    float actual[4];
    std::memcpy(actual, view.data, sizeof actual);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(actual[i], expected[i]) << name << " element " << i;
  }
}

TEST(Safetensors, OpenNamesAMissingFile) {
  EXPECT_THAT([] { SafetensorsFile::open("/nonexistent/dir/model.safetensors"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("cannot open /nonexistent/dir/model.safetensors")));
}

}  // namespace
}  // namespace nibble::model

namespace nibble::model {
namespace {

// The fuzz seeds say what they are: every valid_* parses and every invalid_* is rejected with a
// nibble::Error (the fuzz replay only checks that nothing crashes).
TEST(Safetensors, FuzzSeedCorpusIsWhatItsNamesSay) {
  const auto corpus = std::filesystem::path(NIBBLE_SOURCE_DIR) / "tests/fuzz/corpus/fuzz_safetensors";
  int valid = 0, invalid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    const std::string name = entry.path().filename().string();
    const auto bytes = testing::read_bytes(entry.path());
    if (name.starts_with("valid_")) {
      EXPECT_NO_THROW(parse_safetensors(bytes, name)) << name;
      ++valid;
    } else if (name.starts_with("invalid_")) {
      EXPECT_THROW(parse_safetensors(bytes, name), Error) << name;
      ++invalid;
    }
  }
  EXPECT_GE(valid, 4);
  EXPECT_GE(invalid, 10);
}

}  // namespace
}  // namespace nibble::model
