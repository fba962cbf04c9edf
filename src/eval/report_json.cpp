// report.json, schema "nibble-eval/1":
// { "schema", "model", "reference", "configs": [..], "skipped": [{name, reason}], "settings": {..},
//   "notes": [..],
//   "perplexity": { "documents", "positions", "reference": {"mean_nll", "perplexity", "doc_mean_nll"},
//                   "configs": [{ "name", "mean_nll", "perplexity", "mean_kl", "max_kl", "top1_agreement",
//                                 "delta_nll": CI, "kl": CI, "top1_agreement_ci": CI,
//                                 "delta_nll_resolution": R | null, "doc_mean_nll", "doc_mean_kl",
//                                 "doc_top1_agreement", "by_position": [{begin, end, mean_kl, top1_agreement}] }] },
//   "passkey": { "items", "configs": [{ "name", "passed", "items", "accuracy": {estimate, lower, upper},
//                 "cells": [{length, depth, passed, items}], "vs_reference": {both_pass, only_reference,
//                 only_config, both_fail, mcnemar_exact_p, mcnemar_mid_p, resolution: R} | null }] },
//   "multineedle": { "needles", the same fields as "passkey", and per config "confused": items
//                    answered with another needle's value } }
// CI = {estimate, lower, upper, std_error, items, resamples};
// R = {difference, sigma, minimum_detectable, z_score, resolvable}.
#include <cmath>

#include "eval/report.h"

namespace nibble::eval {
namespace {

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json to_json(const stats::BootstrapInterval& ci) {
  return {{"estimate", ci.estimate}, {"lower", ci.lower},    {"upper", ci.upper},
          {"std_error", ci.std_error}, {"items", ci.items}, {"resamples", ci.resamples}};
}

nlohmann::json to_json(const std::optional<stats::Resolution>& r) {
  if (!r) return nullptr;
  return {{"difference", r->difference},
          {"sigma", r->sigma},
          {"minimum_detectable", r->minimum_detectable},
          {"z_score", finite_or_null(r->z_score)},
          {"resolvable", r->resolvable}};
}

nlohmann::json perplexity_json(const PerplexitySummary& p) {
  nlohmann::json configs = nlohmann::json::array();
  for (const ConfigPerplexitySummary& c : p.configs) {
    nlohmann::json buckets = nlohmann::json::array();
    for (const PositionBucket& b : c.by_position) {
      buckets.push_back({{"begin", b.begin}, {"end", b.end}, {"mean_kl", b.mean_kl}, {"top1_agreement", b.top1_agreement}});
    }
    configs.push_back({{"name", c.name},
                       {"mean_nll", c.mean_nll},
                       {"perplexity", c.perplexity},
                       {"mean_kl", c.mean_kl},
                       {"max_kl", c.max_kl},
                       {"top1_agreement", c.top1_agreement},
                       {"delta_nll", to_json(c.delta_nll)},
                       {"kl", to_json(c.kl)},
                       {"top1_agreement_ci", to_json(c.top1_agreement_ci)},
                       {"delta_nll_resolution", to_json(c.delta_nll_resolution)},
                       {"doc_mean_nll", c.doc_mean_nll},
                       {"doc_mean_kl", c.doc_mean_kl},
                       {"doc_top1_agreement", c.doc_top1_agreement},
                       {"by_position", buckets}});
  }
  return {{"documents", p.documents},
          {"positions", p.positions},
          {"reference",
           {{"name", p.reference}, {"mean_nll", p.reference_mean_nll}, {"perplexity", p.reference_perplexity},
            {"doc_mean_nll", p.reference_doc_mean_nll}}},
          {"configs", configs}};
}

nlohmann::json retrieval_json(const RetrievalSummary& p, int64_t items) {
  nlohmann::json configs = nlohmann::json::array();
  for (const ConfigRetrievalSummary& c : p.configs) {
    nlohmann::json cells = nlohmann::json::array();
    for (const RetrievalCell& cell : c.cells) {
      cells.push_back({{"length", cell.length}, {"depth", cell.depth}, {"passed", cell.passed}, {"items", cell.items}});
    }
    nlohmann::json vs = nullptr;
    if (c.vs_reference) {
      vs = {{"both_pass", c.vs_reference->both_pass},
            {"only_reference", c.vs_reference->only_a},
            {"only_config", c.vs_reference->only_b},
            {"both_fail", c.vs_reference->both_fail},
            {"mcnemar_exact_p", c.mcnemar_p},
            {"mcnemar_mid_p", c.mcnemar_mid_p},
            {"resolution", to_json(c.resolution)}};
    }
    configs.push_back({{"name", c.name},
                       {"passed", c.passed},
                       {"items", c.items},
                       {"accuracy", {{"estimate", c.accuracy.estimate}, {"lower", c.accuracy.lower}, {"upper", c.accuracy.upper}}},
                       {"cells", cells},
                       {"vs_reference", vs}});
  }
  return {{"items", items}, {"reference", p.reference}, {"configs", configs}};
}

}  // namespace

nlohmann::json report_json(const EvalReport& r) {
  nlohmann::json skipped = nlohmann::json::array();
  for (const SkippedConfig& s : r.skipped) skipped.push_back({{"name", s.name}, {"reason", s.reason}});
  nlohmann::json out = {{"schema", "nibble-eval/1"}, {"model", r.model},       {"reference", r.reference},
                        {"configs", r.configs},      {"skipped", skipped},     {"settings", r.settings},
                        {"notes", r.notes}};
  out["perplexity"] = r.perplexity ? perplexity_json(*r.perplexity) : nlohmann::json(nullptr);
  out["passkey"] = r.passkey ? retrieval_json(*r.passkey, static_cast<int64_t>(r.passkey_items.size()))
                             : nlohmann::json(nullptr);
  out["multineedle"] = nullptr;
  if (r.multi_needle) {
    nlohmann::json m = retrieval_json(r.multi_needle->retrieval, static_cast<int64_t>(r.multi_needle_items.size()));
    m["needles"] = r.multi_needle_items.empty() ? 0 : r.multi_needle_items[0].needles.size();
    for (size_t c = 0; c < r.multi_needle->confusions.size(); ++c) {
      m["configs"][c]["confused"] = r.multi_needle->confusions[c];
    }
    out["multineedle"] = m;
  }
  return out;
}

}  // namespace nibble::eval
