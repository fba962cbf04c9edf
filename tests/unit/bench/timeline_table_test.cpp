// bench_model_decode --timeline's table (bench/model_decode/timeline_table.h) on synthetic kernel
// records: the layer rows' links, runs and leads worked by hand, the GPU's idle time between steps,
// and a run whose steps launch different numbers of kernels (the rows from the common count, the
// others named).
#include "timeline_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"

namespace nibble::bench {
namespace {

// One graph-replayed step starting at t0 (ns): an embedding kernel, `layers` layers of a 10 us
// product and a 2 us attention kernel that starts 1 us before the product ends (a programmatic
// launch), an optional extra kernel per layer, then a 5 us head; a sampling kernel outside the graph
// 1 us after. Every graph node carries the launch's correlation id. Returns the step's end.
uint64_t add_step(std::vector<KernelRecord>& out, uint64_t t0, uint32_t correlation, int layers, bool extra) {
  uint64_t t = t0;
  auto node = [&](const char* name, uint64_t start, uint64_t end, int32_t block) {
    out.push_back({.name = name, .start = start, .end = end, .correlation = correlation, .graph = 7, .grid = 132,
                   .block = block});
  };
  node("embedding_kernel", t, t + 1000, 256);
  t += 1000;
  for (int l = 0; l < layers; ++l) {
    node("gemv_kernel", t, t + 10'000, 512);  // link 10 us
    t += 10'000;
    node("decode_kernel", t - 1000, t + 2000, 128);  // starts 1 us early, link 2 us, runs 3 us
    t += 2000;
    if (extra) {
      node("merge_kernel", t, t + 500, 128);
      t += 500;
    }
  }
  node("head_kernel", t, t + 5000, 512);
  t += 5000;
  out.push_back({.name = "sample_kernel", .start = t + 1000, .end = t + 3000, .correlation = correlation + 1});
  return t + 3000;
}

// The table row whose label starts with `label`, or "" (with a failure) when there is none.
std::string row(const std::string& table, const std::string& label) {
  const size_t at = table.find("| " + label);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no row " << label << " in\n" << table;
    return "";
  }
  return table.substr(at, table.find('\n', at) - at);
}

TEST(TimelineTable, LayerRowsLinksAndIdleWorkedByHand) {
  std::vector<KernelRecord> records;
  uint64_t t = 0;
  for (uint32_t s = 0; s < 5; ++s) t = add_step(records, t + 4000, 100 + 2 * s, 4, false);  // 4 us apart
  const std::string table = timeline_table(records, 0.1);
  // 4 measured steps (the last has no next launch), 4 layers of 2 kernels after 1 kernel.
  EXPECT_NE(table.find("4 graph-replayed steps"), std::string::npos) << table;
  EXPECT_NE(table.find("(10 kernels, 4 layers of 2)"), std::string::npos) << table;
  // Step period: 1 + 4·12 + 5 us of graph, then 1 us gap, 2 us sampling, 4 us before the next: 61 us.
  EXPECT_NE(table.find("step period 0.061 ms"), std::string::npos) << table;
  EXPECT_NE(table.find("graph 0.054 ms"), std::string::npos) << table;
  EXPECT_NE(table.find("kernels after the graph (sampling) 2.0 us, GPU idle 5.0 us per step"), std::string::npos)
      << table;
  // | label | calls/step | link | us/step | of graph | run | lead |
  EXPECT_EQ(row(table, "layer, kernel 1: gemv_kernel x 512"),
            "| layer, kernel 1: gemv_kernel x 512 | 4 | 10.00 | 40.0 | 74.1% | 10.00 | 0.00 |");
  EXPECT_EQ(row(table, "layer, kernel 2: decode_kernel x 128"),
            "| layer, kernel 2: decode_kernel x 128 | 4 | 2.00 | 8.0 | 14.8% | 3.00 | 1.00 |");
  EXPECT_EQ(table.find("ran another number of kernels"), std::string::npos) << table;
}

TEST(TimelineTable, StepsWithAnotherKernelCountAreLeftOutOfTheRowsAndNamed) {
  std::vector<KernelRecord> records;
  uint64_t t = 0;
  // Step 0 with a third kernel per layer (as a plan that changes the kernel set would), then 4 without.
  t = add_step(records, t + 4000, 100, 4, true);
  for (uint32_t s = 1; s < 6; ++s) t = add_step(records, t + 4000, 100 + 2 * s, 4, false);
  const std::string table = timeline_table(records, 0.1);
  EXPECT_NE(table.find("5 graph-replayed steps"), std::string::npos) << table;
  // The rows follow the 4 common steps (2 kernels per layer), not the first step's layout.
  EXPECT_NE(table.find("4 layers of 2"), std::string::npos) << table;
  EXPECT_NE(table.find("1 of the 5 steps ran another number of kernels than 10 (14 kernels in 1 step): the rows "
                       "below leave them out"),
            std::string::npos)
      << table;
  EXPECT_EQ(row(table, "layer, kernel 2: decode_kernel x 128"),
            "| layer, kernel 2: decode_kernel x 128 | 4 | 2.00 | 8.0 | 14.8% | 3.00 | 1.00 |");
  EXPECT_EQ(table.find("merge_kernel"), std::string::npos) << table;
}

TEST(TimelineTable, FewerThanTwoGraphLaunchesIsAnError) {
  std::vector<KernelRecord> records;
  add_step(records, 0, 100, 2, false);
  EXPECT_THROW((void)timeline_table(records, 0.1), Error);
  EXPECT_THROW((void)timeline_table({}, 0.1), Error);
}

}  // namespace
}  // namespace nibble::bench
