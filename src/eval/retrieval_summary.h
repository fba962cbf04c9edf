#pragma once
// Accuracy of a retrieval task (passkey, multineedle) per configuration — overall with a Wilson
// interval, and by length x depth — and McNemar's exact test against the reference configuration on
// the same items. Task-independent: it sees each item's (length, depth) and pass/fail only.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stats/paired_tests.h"
#include "stats/resolving_power.h"

namespace nibble::eval {

struct RetrievalCell {
  int64_t length = 0;
  double depth = 0;
  int64_t passed = 0;
  int64_t items = 0;
};

struct ConfigRetrievalSummary {
  std::string name{};
  int64_t passed = 0;
  int64_t items = 0;
  stats::ProportionInterval accuracy{};  // Wilson 95%
  std::vector<RetrievalCell> cells{};    // lengths x depths, in item order
  // Against the reference (absent for the reference itself): the 2x2 table (A = reference),
  // exact and mid-p McNemar, and whether the paired run could resolve the accuracy difference.
  std::optional<stats::PairedCounts> vs_reference{};
  double mcnemar_p = 1.0;
  double mcnemar_mid_p = 1.0;
  std::optional<stats::Resolution> resolution{};  // difference = accuracy - reference accuracy
};

struct RetrievalSummary {
  std::string reference{};
  std::vector<ConfigRetrievalSummary> configs{};  // the reference first
};

struct RetrievalItemKey {
  int64_t length = 0;
  double depth = 0;
};

// items[i]: item i's (length, depth), consecutive items of one cell adjacent; passes[c][i]: whether
// configuration c passed item i; names[0] is the reference. The resolution uses the paired sigma
// under "no difference" (stats/resolving_power.h). Throws nibble::Error for mismatched sizes.
RetrievalSummary summarize_retrieval(const std::vector<RetrievalItemKey>& items, const std::vector<std::string>& names,
                                     const std::vector<std::vector<bool>>& passes, const std::string& task,
                                     const stats::DetectOptions& detect = {});

}  // namespace nibble::eval
