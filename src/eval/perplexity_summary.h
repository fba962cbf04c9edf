#pragma once
// Per-document and overall perplexity / KL / top-1 results of a PerplexityRun, with paired
// statistics against the reference. Documents are the statistical items: tokens of one document
// share their context and are correlated, so the bootstrap resamples whole documents (all of equal
// length, so the token-weighted and document means coincide).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "eval/perplexity.h"
#include "stats/bootstrap.h"
#include "stats/resolving_power.h"

namespace nibble::eval {

struct PositionBucket {
  int64_t begin = 0;  // first position in the bucket
  int64_t end = 0;    // one past the last
  double mean_kl = 0;
  double top1_agreement = 0;
};

struct ConfigPerplexitySummary {
  std::string name{};
  double mean_nll = 0;        // nats per token
  double perplexity = 0;      // exp(mean_nll)
  double mean_kl = 0;         // KL(reference || config), nats per token
  double max_kl = 0;
  double top1_agreement = 0;  // fraction of positions
  stats::BootstrapInterval delta_nll{};       // mean NLL(config) - NLL(reference), over documents
  stats::BootstrapInterval kl{};              // mean KL over documents
  stats::BootstrapInterval top1_agreement_ci{};
  // Whether this run could have resolved its Δ NLL: the paired sigma sd(d_doc)/sqrt(docs); empty
  // with fewer than 2 documents.
  std::optional<stats::Resolution> delta_nll_resolution{};
  std::vector<double> doc_mean_nll{};        // [documents]
  std::vector<double> doc_mean_kl{};         // [documents]
  std::vector<double> doc_top1_agreement{};  // [documents]
  std::vector<PositionBucket> by_position{};
};

struct PerplexitySummary {
  std::string reference{};
  int64_t documents = 0;
  int64_t positions = 0;  // scored positions per document
  double reference_mean_nll = 0;
  double reference_perplexity = 0;
  std::vector<double> reference_doc_mean_nll{};  // [documents]
  std::vector<ConfigPerplexitySummary> configs{};
};

struct SummaryOptions {
  stats::BootstrapOptions bootstrap{};
  int64_t position_buckets = 16;  // KL by context position, equal-width buckets
  stats::DetectOptions detect{};
};

PerplexitySummary summarize_perplexity(const PerplexityRun& run, const SummaryOptions& options);

}  // namespace nibble::eval
