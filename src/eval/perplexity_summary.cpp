#include "eval/perplexity_summary.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace nibble::eval {
namespace {

// Mean over each document's positions of values ([documents, positions]) -> [documents].
template <typename T>
std::vector<double> per_document_mean(const std::vector<T>& values, int64_t documents, int64_t positions, double sign) {
  std::vector<double> out(static_cast<size_t>(documents));
  for (int64_t d = 0; d < documents; ++d) {
    double sum = 0.0;
    for (int64_t p = 0; p < positions; ++p) sum += static_cast<double>(values[static_cast<size_t>(d * positions + p)]);
    out[static_cast<size_t>(d)] = sign * sum / static_cast<double>(positions);
  }
  return out;
}

double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace

PerplexitySummary summarize_perplexity(const PerplexityRun& run, const SummaryOptions& options) {
  NIBBLE_CHECK(options.position_buckets >= 1, "position buckets must be at least 1, got {}", options.position_buckets);
  const ConfigTokenScores& ref = run.reference_scores;
  PerplexitySummary out{.reference = run.reference.name, .documents = ref.documents, .positions = ref.positions};
  out.reference_doc_mean_nll = per_document_mean(ref.logprob, ref.documents, ref.positions, -1.0);
  out.reference_mean_nll = mean(out.reference_doc_mean_nll);
  out.reference_perplexity = std::exp(out.reference_mean_nll);

  const int64_t buckets = std::min(options.position_buckets, ref.positions);
  for (size_t ci = 0; ci < run.configs.size(); ++ci) {
    const ConfigTokenScores& s = run.configs[ci];
    ConfigPerplexitySummary c{.name = s.config.name};
    c.doc_mean_nll = per_document_mean(s.logprob, s.documents, s.positions, -1.0);
    c.doc_mean_kl = per_document_mean(s.kl, s.documents, s.positions, 1.0);
    c.doc_top1_agreement = per_document_mean(s.top1_agree, s.documents, s.positions, 1.0);
    c.mean_nll = mean(c.doc_mean_nll);
    c.perplexity = std::exp(c.mean_nll);
    c.mean_kl = mean(c.doc_mean_kl);
    c.max_kl = *std::max_element(s.kl.begin(), s.kl.end());
    c.top1_agreement = mean(c.doc_top1_agreement);
    // Each interval gets its own seed stream so that adding a config does not shift the others.
    stats::BootstrapOptions b = options.bootstrap;
    b.seed = options.bootstrap.seed + 3 * ci;
    c.delta_nll = stats::paired_bootstrap_mean_difference(out.reference_doc_mean_nll, c.doc_mean_nll, {}, b);
    b.seed += 1;
    c.kl = stats::bootstrap_mean(c.doc_mean_kl, {}, b);
    b.seed += 1;
    c.top1_agreement_ci = stats::bootstrap_mean(c.doc_top1_agreement, {}, b);
    if (s.documents >= 2) {
      std::vector<double> diff(c.doc_mean_nll.size());  // [documents] Δ NLL per document
      for (size_t d = 0; d < diff.size(); ++d) diff[d] = c.doc_mean_nll[d] - out.reference_doc_mean_nll[d];
      c.delta_nll_resolution = stats::resolve(c.delta_nll.estimate, stats::paired_sigma(diff), options.detect);
    }
    for (int64_t k = 0; k < buckets; ++k) {
      PositionBucket bucket{.begin = k * s.positions / buckets, .end = (k + 1) * s.positions / buckets};
      double kl_sum = 0.0, agree_sum = 0.0;
      for (int64_t d = 0; d < s.documents; ++d) {
        for (int64_t p = bucket.begin; p < bucket.end; ++p) {
          kl_sum += s.kl[static_cast<size_t>(d * s.positions + p)];
          agree_sum += s.top1_agree[static_cast<size_t>(d * s.positions + p)];
        }
      }
      const double cells = static_cast<double>((bucket.end - bucket.begin) * s.documents);
      bucket.mean_kl = kl_sum / cells;
      bucket.top1_agreement = agree_sum / cells;
      c.by_position.push_back(bucket);
    }
    out.configs.push_back(std::move(c));
  }
  return out;
}

}  // namespace nibble::eval
