// bench_decode_attention's list flags (bench/decode_attention/decode_bench_args.h): what they accept,
// with the values they read, and every kind of item they reject, each with a message naming the flag
// and the item.
#include "decode_bench_args.h"

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace nibble::bench {
namespace {

using quant::KvDtype;

// Runs fn, which must throw nibble::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& p : parts) EXPECT_NE(what.find(p), std::string::npos) << what << " lacks '" << p << "'";
  }
}

TEST(DecodeBenchArgs, ShapesReadEveryItem) {
  const std::vector<DecodeShape> s = parse_decode_shapes("4:32768:8,8:1024:256,1:1:1");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].group, 4);
  EXPECT_EQ(s[0].ctx, 32768);
  EXPECT_EQ(s[0].batch, 8);
  EXPECT_EQ(s[1].group, 8);
  EXPECT_EQ(s[1].ctx, 1024);
  EXPECT_EQ(s[1].batch, 256);
  EXPECT_EQ(s[2].ctx, 1);
  const std::vector<DecodeShape> top = parse_decode_shapes("256:16777216:65536");
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].group, kMaxShapeGroup);
  EXPECT_EQ(top[0].ctx, kMaxShapeContext);
  EXPECT_EQ(top[0].batch, kMaxShapeBatch);
}

TEST(DecodeBenchArgs, ShapesRejectWhatIsNotThreePositiveIntegersInRange) {
  for (const std::string item : {"", "4:32768", "4:32768:8:1", "0:1024:8", "4:0:8", "4:1024:0", "-4:1024:8",
                                 "4:1024:+8", " 4:1024:8", "4:1024:8 ", "4:1e3:8", "4.5:1024:8", "4:1024:8x",
                                 "257:1024:8", "4:16777217:8", "4:1024:65537", "4:99999999999999999999:8",
                                 "4::8", "a:b:c"}) {
    SCOPED_TRACE(item);
    expect_error([&] { parse_decode_shapes(item); }, {"--shapes", "'" + item + "'"});
    // The same item after a good one: the whole list is rejected, naming the bad item.
    expect_error([&] { parse_decode_shapes("4:1024:8," + item); }, {"--shapes", "'" + item + "'"});
  }
}

TEST(DecodeBenchArgs, FormatsReadNamesInOrder) {
  const std::vector<KvDtype> f = parse_formats("nvfp4,fp8,bf16,k8v4,f32");
  EXPECT_EQ(f, (std::vector<KvDtype>{KvDtype::kNVFP4, KvDtype::kFP8, KvDtype::kBF16, KvDtype::kK8V4, KvDtype::kF32}));
  expect_error([] { parse_formats("fp8,fp4"); }, {"--formats", "'fp4'"});
  expect_error([] { parse_formats("fp8,"); }, {"--formats", "''"});
  expect_error([] { parse_formats("FP8"); }, {"--formats", "'FP8'"});
}

TEST(DecodeBenchArgs, WriteShapesReadTokensAndScale) {
  const std::vector<WriteShape> w =
      parse_write_shapes("256:1,65536:0.37,4096:0.25", quant::Nvfp4ScaleRule::kFourOverSix);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].tokens, 256);
  EXPECT_EQ(w[0].g, 1.0f);
  EXPECT_EQ(w[1].tokens, 65536);
  EXPECT_EQ(w[1].g, 0.37f);
  EXPECT_EQ(w[2].g, 0.25f);
  for (const WriteShape& s : w) EXPECT_EQ(s.rule, quant::Nvfp4ScaleRule::kFourOverSix);
  EXPECT_EQ(parse_write_shapes("16777216:2", quant::Nvfp4ScaleRule::kAmaxOver6).at(0).tokens, kMaxWriteTokens);
}

TEST(DecodeBenchArgs, WriteShapesRejectBadTokensAndScales) {
  for (const std::string item : {"", "256", ":1", "256:", "0:1", "-5:1", "16777217:1", "256:0", "256:-1", "256:nan",
                                 "256:inf", "256:1e-50", "256:1x", "256: 1", "x:1", "99999999999999999999:1"}) {
    SCOPED_TRACE(item);
    expect_error([&] { parse_write_shapes(item, quant::Nvfp4ScaleRule::kAmaxOver6); },
                 {"--write-shapes", "'" + item + "'"});
  }
}

}  // namespace
}  // namespace nibble::bench
