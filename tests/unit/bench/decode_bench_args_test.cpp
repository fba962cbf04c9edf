// bench_decode_attention's command line (bench/decode_attention/decode_bench_args.h): what the list
// flags and the whole parser accept, with the values they read and the defaults they resolve, and
// every kind of text they reject, each with a message naming the flag and the text.
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
  EXPECT_EQ(parse_groups("1,4,8", "--extend-gqa"), (std::vector<int>{1, 4, 8}));
  EXPECT_EQ(parse_groups("256", "--extend-gqa"), (std::vector<int>{256}));
  expect_error([] { parse_groups("4,0", "--extend-gqa"); }, {"--extend-gqa", "'0'"});
  expect_error([] { parse_groups("257", "--extend-gqa"); }, {"--extend-gqa", "'257'", "1 to 256"});
  expect_error([] { parse_groups("4,,8", "--extend-gqa"); }, {"--extend-gqa", "''"});
  expect_error([] { parse_groups("+4", "--extend-gqa"); }, {"--extend-gqa", "'+4'"});
}

TEST(DecodeBenchArgs, ExtendShapesArePrefixColonChunk) {
  const std::vector<ExtendShape> shapes = parse_extend_shapes("32768:64,1048576:1,1:65536", "--extend-shapes");
  ASSERT_EQ(shapes.size(), 3u);
  EXPECT_EQ(shapes[0].prefix, 32768);
  EXPECT_EQ(shapes[0].chunk, 64);
  EXPECT_EQ(shapes[1].prefix, 1048576);
  EXPECT_EQ(shapes[1].chunk, 1);
  EXPECT_EQ(shapes[2].prefix, 1);
  EXPECT_EQ(shapes[2].chunk, 65536);
  expect_error([] { parse_extend_shapes("32768", "--extend-shapes"); }, {"--extend-shapes", "'32768'", "PREFIX:CHUNK"});
  expect_error([] { parse_extend_shapes("0:64", "--extend-shapes"); }, {"--extend-shapes", "'0:64'"});
  expect_error([] { parse_extend_shapes("1048577:64", "--extend-shapes"); }, {"'1048577:64'"});
  expect_error([] { parse_extend_shapes("32768:65537", "--extend-shapes"); }, {"'32768:65537'"});
  expect_error([] { parse_extend_shapes("32768:64,", "--extend-shapes"); }, {"--extend-shapes", "''"});
  expect_error([] { parse_extend_shapes("32768:-64", "--extend-shapes"); }, {"'32768:-64'"});
  expect_error([] { parse_extend_shapes("32768:64:1", "--extend-shapes"); }, {"'32768:64:1'"});
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

// The parser over the flags after the program's name.
DecodeBenchOptions parse(std::initializer_list<std::string> args) { return parse_decode_bench_options(args); }

TEST(DecodeBenchOptions, NoFlagsGiveTheFullSweep) {
  const DecodeBenchOptions o = parse({});
  EXPECT_EQ(o.formats, (std::vector<KvDtype>{KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4}));
  ASSERT_EQ(o.shapes.size(), 50u);  // GQA 4 and 8 x 5 contexts x 5 batches
  EXPECT_EQ(o.shapes.front().group, 4);
  EXPECT_EQ(o.shapes.front().ctx, 1024);
  EXPECT_EQ(o.shapes.front().batch, 1);
  EXPECT_EQ(o.shapes.back().group, 8);
  EXPECT_EQ(o.shapes.back().ctx, 131072);
  EXPECT_EQ(o.shapes.back().batch, 256);
  ASSERT_EQ(o.write_shapes.size(), 4u);
  EXPECT_EQ(o.write_shapes[3].tokens, 65536);
  EXPECT_EQ(o.write_shapes[3].g, 0.37f);
  EXPECT_EQ(o.timings, (std::vector<DecodeTiming>{DecodeTiming::kGraph, DecodeTiming::kEager}));
  EXPECT_TRUE(o.both_orders);
  EXPECT_TRUE(o.chunks.empty());
  EXPECT_EQ(o.page_size, 16);
  EXPECT_EQ(o.head_dim, 128);
  EXPECT_EQ(o.kv_heads, 8);
  EXPECT_EQ(o.span_units_warps, -1);
  EXPECT_TRUE(o.pair_merge);
  EXPECT_FALSE(o.prefix_ready);
  EXPECT_FALSE(o.engine_batches);
  EXPECT_EQ(o.mixed_seed, 0u);
  EXPECT_EQ(o.sustain_seconds, 0.0);
  EXPECT_EQ(o.json_path, "");
}

TEST(DecodeBenchOptions, QuickAndPartsOfTheRun) {
  EXPECT_EQ(parse({"--quick"}).shapes.size(), 8u);  // 2 groups x 2 contexts x 2 batches
  const DecodeBenchOptions write_only = parse({"--write-only", "--shapes", "4:1024:8"});
  EXPECT_TRUE(write_only.shapes.empty());
  EXPECT_EQ(write_only.write_shapes.size(), 4u);
  const DecodeBenchOptions no_write = parse({"--no-write", "--write-shapes", "256:1"});
  EXPECT_TRUE(no_write.write_shapes.empty());
  EXPECT_EQ(no_write.shapes.size(), 50u);
  expect_error([] { parse({"--no-write", "--write-only"}); }, {"--no-write", "--write-only"});
}

TEST(DecodeBenchOptions, EveryFlagReadsItsValue) {
  const DecodeBenchOptions o =
      parse({"--json", "out.json", "--shapes", "4:32768:8", "--formats", "nvfp4,fp8", "--one-order", "--timing",
             "graph", "--chunks", "128,4096", "--page-size", "64", "--head-dim", "256", "--kv-heads", "2",
             "--engine-batches", "--mixed", "7", "--units", "16", "--pair-merge", "off", "--prefix-ready", "on",
             "--sustain", "2.5", "--write-shapes", "4096:0.25", "--nvfp4-rule", "4over6"});
  EXPECT_EQ(o.json_path, "out.json");
  ASSERT_EQ(o.shapes.size(), 1u);
  EXPECT_EQ(o.shapes[0].ctx, 32768);
  EXPECT_EQ(o.formats, (std::vector<KvDtype>{KvDtype::kNVFP4, KvDtype::kFP8}));
  EXPECT_FALSE(o.both_orders);
  EXPECT_EQ(o.timings, std::vector<DecodeTiming>{DecodeTiming::kGraph});
  EXPECT_EQ(o.chunks, (std::vector<int64_t>{128, 4096}));
  EXPECT_EQ(o.page_size, 64);
  EXPECT_EQ(o.head_dim, 256);
  EXPECT_EQ(o.kv_heads, 2);
  EXPECT_TRUE(o.engine_batches);
  EXPECT_EQ(o.mixed_seed, 7u);
  EXPECT_EQ(o.span_units_warps, 16);
  EXPECT_FALSE(o.pair_merge);
  EXPECT_TRUE(o.prefix_ready);
  EXPECT_EQ(o.sustain_seconds, 2.5);
  ASSERT_EQ(o.write_shapes.size(), 1u);
  EXPECT_EQ(o.write_shapes[0].tokens, 4096);
  // --nvfp4-rule after --write-shapes still applies to them.
  EXPECT_EQ(o.write_shapes[0].rule, quant::Nvfp4ScaleRule::kFourOverSix);
  EXPECT_EQ(parse({"--timing", "eager"}).timings, std::vector<DecodeTiming>{DecodeTiming::kEager});
  EXPECT_EQ(parse({"--units", "off"}).span_units_warps, 0);
  EXPECT_EQ(parse({"--units", "8"}).span_units_warps, 8);
  EXPECT_EQ(parse({"--head-dim", "64"}).head_dim, 64);
  EXPECT_EQ(parse({"--page-size", "1024"}).page_size, kMaxPageSize);
  EXPECT_EQ(parse({"--sustain", "600"}).sustain_seconds, kMaxSustainSeconds);
  EXPECT_EQ(parse({"--mixed", "18446744073709551615"}).mixed_seed, 18446744073709551615ull);
  // A later flag overrides an earlier one.
  EXPECT_EQ(parse({"--kv-heads", "4", "--kv-heads", "1"}).kv_heads, 1);
}

TEST(DecodeBenchOptions, RejectsWhatItCannotRead) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--bogus"}, "'--bogus'"},
      {{"--json"}, "--json needs a value"},
      {{"--shapes"}, "--shapes needs a value"},
      {{"--json", ""}, "--json"},
      {{"--timing", "both2"}, "'both2'"},
      {{"--chunks", "100"}, "'100'"},
      {{"--chunks", "0"}, "'0'"},
      {{"--chunks", "128,"}, "''"},
      {{"--chunks", "33554432"}, "'33554432'"},
      {{"--page-size", "8"}, "'8'"},
      {{"--page-size", "24"}, "'24'"},
      {{"--page-size", "2048"}, "'2048'"},
      {{"--head-dim", "96"}, "'96'"},
      {{"--kv-heads", "0"}, "'0'"},
      {{"--kv-heads", "65"}, "'65'"},
      {{"--kv-heads", "4x"}, "'4x'"},
      {{"--mixed", "0"}, "'0'"},
      {{"--mixed", "-1"}, "'-1'"},
      {{"--mixed", "18446744073709551616"}, "'18446744073709551616'"},
      {{"--units", "4"}, "'4'"},
      {{"--pair-merge", "yes"}, "'yes'"},
      {{"--prefix-ready", ""}, "''"},
      {{"--sustain", "-1"}, "'-1'"},
      {{"--sustain", "601"}, "'601'"},
      {{"--sustain", "nan"}, "'nan'"},
      {{"--sustain", " 1"}, "' 1'"},
      {{"--nvfp4-rule", "5"}, "'5'"},
      {{"--shapes", "4:1024"}, "'4:1024'"},
      {{"--formats", "fp4"}, "'fp4'"},
      {{"--write-shapes", "256:0"}, "'256:0'"},
  };
  for (const auto& [args, part] : bad) {
    SCOPED_TRACE(args.front());
    expect_error([&] { parse_decode_bench_options(args); }, {args.front(), part});
  }
}

}  // namespace
}  // namespace nibble::bench
