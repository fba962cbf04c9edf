#include "eval/eval_run.h"

#include <fmt/format.h>

#include <algorithm>

#include "cache/kv_scales_file.h"
#include "common/error.h"
#include "eval/corpus.h"
#include "eval/kv_config.h"
#include "runtime/loaded_model.h"
#include "tokenizer/tokenizer.h"

namespace nibble::eval {
namespace {

bool wants(const EvalOptions& o, const std::string& task) {
  return std::find(o.tasks.begin(), o.tasks.end(), task) != o.tasks.end();
}

}  // namespace

EvalReport run_eval(const EvalOptions& o) {
  for (const std::string& t : o.tasks) {
    NIBBLE_CHECK(t == "perplexity" || t == "passkey" || t == "multineedle",
                 "unknown eval task '{}' (expected perplexity, passkey, multineedle)", t);
  }
  NIBBLE_CHECK(!o.tasks.empty(), "no eval task given (expected perplexity, passkey and/or multineedle)");
  NIBBLE_CHECK(!wants(o, "perplexity") || !o.corpus.empty(), "the perplexity task needs --corpus FILE (plain text)");
  const KvConfig reference = parse_kv_config(o.reference);
  const std::vector<KvConfig> requested = parse_kv_configs(o.configs);

  runtime::LoadedModel model = runtime::load_model({.dir = o.model_dir,
                                                    .device = o.device,
                                                    .num_threads = o.threads,
                                                    .progress = std::nullopt,
                                                    .weights = runtime::parse_weight_precision(o.weights)});
  const Tokenizer tokenizer = Tokenizer::load(o.model_dir);
  const int64_t head_dim = model.config().head_dim;
  const int64_t context = model.config().max_position_embeddings;
  if (auto why = unsuitable_reason(reference, head_dim)) {
    NIBBLE_FAIL("the reference configuration {} cannot run on this model: {}", reference.name, *why);
  }

  EvalReport report{.model = o.model_dir, .reference = reference.name};
  std::vector<KvConfig> configs;
  for (const KvConfig& c : requested) {
    if (auto why = unsuitable_reason(c, head_dim)) {
      report.skipped.push_back({.name = c.name, .reason = *why});
    } else {
      configs.push_back(c);
      report.configs.push_back(c.name);
    }
  }
  const std::optional<cache::KvScalesFile> scales_file =
      o.kv_scales.empty() ? std::nullopt : std::optional(cache::read_kv_scales_file(o.kv_scales));
  for (KvConfig& c : configs) {
    c.nvfp4_scale_rule = o.nvfp4_scale_rule;
    const quant::KvFormat f = quant::kv_format(c.dtype);
    if (!scales_file || !(quant::uses_global_scale(f.k) || quant::uses_global_scale(f.v))) continue;
    NIBBLE_CHECK(scales_file->rotation == c.rotation,
                 "--kv-scales {} was calibrated for another rotation than configuration {} (calibrate again with "
                 "its --rotate, or run that configuration separately)", o.kv_scales, c.name);
    const cache::KvScalesUse use{
        .num_layers = model.transformer().kv_geometry().num_layers, .dtype = c.dtype, .rotation = c.rotation};
    c.global_scales = cache::select_kv_global_scales(*scales_file, use, o.kv_scales);
  }
  report.settings = {{"tasks", o.tasks},     {"context", o.context},      {"documents", o.documents},
                     {"chunk", o.chunk},     {"page_size", o.page_size},  {"seed", o.seed},
                     {"device", o.device},   {"weights", o.weights.empty() ? "default" : o.weights},
                     {"corpus", o.corpus},        {"passkey_lengths", o.passkey_lengths},
                     {"passkey_depths", o.passkey_depths}, {"samples", o.samples},
                     {"max_new_tokens", o.max_new_tokens}, {"needles", o.needles}, {"bootstrap_resamples", o.bootstrap_resamples},
                     {"head_dim", head_dim}, {"model_context", context}, {"kv_scales", o.kv_scales},
                     {"nvfp4_scale_rule", o.nvfp4_scale_rule == quant::Nvfp4ScaleRule::kFourOverSix ? "4over6" : "6"}};

  if (wants(o, "perplexity")) {
    NIBBLE_CHECK(o.context <= context, "--context {} exceeds the model's context of {} tokens", o.context, context);
    const auto documents = load_documents(tokenizer, o.corpus, {.context = o.context, .max_documents = o.documents});
    if (o.documents > 0 && static_cast<int64_t>(documents.size()) < o.documents) {
      report.notes.push_back(fmt::format("the corpus holds only {} documents of {} tokens ({} requested)",
                                         documents.size(), o.context, o.documents));
    }
    report.perplexity_run = run_perplexity(model, documents, reference, configs,
                                           {.chunk = o.chunk, .page_size = o.page_size});
    report.perplexity = summarize_perplexity(
        *report.perplexity_run, {.bootstrap = {.resamples = o.bootstrap_resamples, .seed = o.seed}});
  }

  if (wants(o, "passkey") || wants(o, "multineedle")) {
    std::vector<int64_t> lengths;  // the requested retrieval lengths that fit the model's context
    for (int64_t len : o.passkey_lengths) {
      if (len + o.max_new_tokens > context) {
        report.notes.push_back(fmt::format("retrieval length {} skipped: {} + {} new tokens exceed the model's context of {}",
                                           len, len, o.max_new_tokens, context));
      } else {
        lengths.push_back(len);
      }
    }
    if (lengths.empty()) report.notes.push_back("retrieval tasks skipped: no length fits the model's context");
    std::vector<std::string> names = {reference.name};
    for (const KvConfig& c : configs) names.push_back(c.name);
    // Runs `run(config)` for the reference and every configuration, in `names` order.
    auto each_config = [&](auto&& run, auto& outcomes) {
      outcomes.push_back(run(reference));
      for (const KvConfig& c : configs) outcomes.push_back(run(c));
    };
    if (wants(o, "passkey") && !lengths.empty()) {
      const PasskeyOptions p{.lengths = lengths, .depths = o.passkey_depths, .samples = o.samples, .seed = o.seed,
                             .max_new_tokens = o.max_new_tokens, .chunk = o.chunk, .page_size = o.page_size};
      report.passkey_items = make_passkey_items(tokenizer, p);
      each_config([&](const KvConfig& c) { return run_passkey(model, tokenizer, report.passkey_items, c, p); },
                  report.passkey_outcomes);
      report.passkey = summarize_passkey(report.passkey_items, names, report.passkey_outcomes);
    }
    if (wants(o, "multineedle") && !lengths.empty()) {
      const MultiNeedleOptions m{.lengths = lengths, .depths = o.passkey_depths, .needles = o.needles,
                                 .samples = o.samples, .seed = o.seed, .max_new_tokens = o.max_new_tokens,
                                 .chunk = o.chunk, .page_size = o.page_size};
      report.multi_needle_items = make_multi_needle_items(tokenizer, m);
      each_config(
          [&](const KvConfig& c) { return run_multi_needle(model, tokenizer, report.multi_needle_items, c, m); },
          report.multi_needle_outcomes);
      report.multi_needle = summarize_multi_needle(report.multi_needle_items, names, report.multi_needle_outcomes);
    }
  }
  return report;
}

}  // namespace nibble::eval
