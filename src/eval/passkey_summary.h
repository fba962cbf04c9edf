#pragma once
// Passkey accuracy per configuration (overall with a Wilson interval, and by length x depth) and
// McNemar's exact test against the reference configuration on the same items.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "eval/passkey.h"
#include "stats/paired_tests.h"
#include "stats/resolving_power.h"

namespace nibble::eval {

struct PasskeyCell {
  int64_t length = 0;
  double depth = 0;
  int64_t passed = 0;
  int64_t items = 0;
};

struct ConfigPasskeySummary {
  std::string name{};
  int64_t passed = 0;
  int64_t items = 0;
  stats::ProportionInterval accuracy{};  // Wilson 95%
  std::vector<PasskeyCell> cells{};      // lengths x depths, in item order
  // Against the reference (absent for the reference itself): the 2x2 table (A = reference),
  // exact and mid-p McNemar, and whether the paired run could resolve the accuracy difference.
  std::optional<stats::PairedCounts> vs_reference{};
  double mcnemar_p = 1.0;
  double mcnemar_mid_p = 1.0;
  std::optional<stats::Resolution> resolution{};  // difference = accuracy - reference accuracy
};

struct PasskeySummary {
  std::string reference{};
  std::vector<ConfigPasskeySummary> configs{};  // the reference first
};

// outcomes[i]: configuration i's outcomes, item by item (same order as `items`); names[0] is the
// reference. The resolution uses the paired sigma under "no difference" (stats/resolving_power.h).
PasskeySummary summarize_passkey(const std::vector<PasskeyItem>& items, const std::vector<std::string>& names,
                                 const std::vector<std::vector<PasskeyOutcome>>& outcomes,
                                 const stats::DetectOptions& detect = {});

}  // namespace nibble::eval
