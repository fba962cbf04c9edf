#include <fmt/format.h>

#include <fstream>
#include <map>

#include "common/error.h"
#include "common/npy.h"
#include "eval/report.h"
#include "eval/svg_plot.h"

namespace nibble::eval {
namespace {

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  NIBBLE_CHECK(out.good(), "cannot write {}", path.string());
  out << text;
  NIBBLE_CHECK(out.good(), "failed writing {}", path.string());
}

}  // namespace

std::string kl_by_position_svg(const EvalReport& r) {
  if (!r.perplexity) return "";
  LineChart chart{.title = fmt::format("KL({} || config) by context position", r.reference),
                  .x_label = "context position (bucket midpoint)",
                  .y_label = "mean KL (nats/token)"};
  for (const ConfigPerplexitySummary& c : r.perplexity->configs) {
    PlotSeries s{.name = c.name};
    for (const PositionBucket& b : c.by_position) {
      s.x.push_back(0.5 * static_cast<double>(b.begin + b.end - 1));
      s.y.push_back(b.mean_kl);
    }
    chart.series.push_back(std::move(s));
  }
  return render_svg(chart);
}

std::string passkey_by_depth_svg(const EvalReport& r) {
  if (!r.passkey) return "";
  return retrieval_by_depth_svg(*r.passkey, "Passkey retrieval accuracy by depth (all lengths)",
                                "needle depth (0 = start, 1 = end)");
}

std::string multi_needle_by_depth_svg(const EvalReport& r) {
  if (!r.multi_needle) return "";
  return retrieval_by_depth_svg(r.multi_needle->retrieval, "Multi-needle retrieval accuracy by depth (all lengths)",
                                "depth of the asked needle (0 = start, 1 = end)");
}

std::string retrieval_by_depth_svg(const RetrievalSummary& summary, const std::string& title,
                                   const std::string& x_label) {
  LineChart chart{.title = title, .x_label = x_label, .y_label = "accuracy"};
  for (const ConfigRetrievalSummary& c : summary.configs) {
    std::map<double, std::pair<int64_t, int64_t>> by_depth;  // depth -> (passed, items)
    for (const RetrievalCell& cell : c.cells) {
      by_depth[cell.depth].first += cell.passed;
      by_depth[cell.depth].second += cell.items;
    }
    PlotSeries s{.name = c.name};
    for (const auto& [depth, counts] : by_depth) {
      s.x.push_back(depth);
      s.y.push_back(static_cast<double>(counts.first) / static_cast<double>(counts.second));
    }
    chart.series.push_back(std::move(s));
  }
  return render_svg(chart);
}

std::vector<std::filesystem::path> write_report_files(const std::filesystem::path& dir, const EvalReport& r) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  NIBBLE_CHECK(!ec, "cannot create the output directory {}: {}", dir.string(), ec.message());
  std::vector<std::filesystem::path> written;
  auto text_file = [&](const std::string& name, const std::string& text) {
    write_text(dir / name, text);
    written.push_back(dir / name);
  };
  text_file("report.json", report_json(r).dump(2) + "\n");
  text_file("report.md", report_markdown(r));
  if (r.perplexity_run) {
    for (const ConfigTokenScores& s : r.perplexity_run->configs) {
      std::vector<float> data;  // [documents, positions, 3]
      data.reserve(s.logprob.size() * 3);
      for (size_t i = 0; i < s.logprob.size(); ++i) {
        data.push_back(static_cast<float>(s.logprob[i]));
        data.push_back(static_cast<float>(s.kl[i]));
        data.push_back(static_cast<float>(s.top1_agree[i]));
      }
      const std::vector<int64_t> shape = {s.documents, s.positions, 3};
      const auto path = dir / ("tokens_" + file_stem(s.config) + ".npy");
      write_npy(path, shape, data);
      written.push_back(path);
    }
    text_file("kl_by_position.svg", kl_by_position_svg(r));
  }
  if (r.passkey) {
    std::string lines;
    for (size_t c = 0; c < r.passkey_outcomes.size(); ++c) {
      for (size_t i = 0; i < r.passkey_items.size(); ++i) {
        const PasskeyItem& item = r.passkey_items[i];
        const PasskeyOutcome& o = r.passkey_outcomes[c][i];
        lines += nlohmann::json({{"config", r.passkey->configs[c].name},
                                 {"length", item.length},
                                 {"prompt_tokens", item.prompt.size()},
                                 {"depth", item.depth},
                                 {"sample", item.sample},
                                 {"key", item.key},
                                 {"output", o.output},
                                 {"pass", o.pass}})
                     .dump() + "\n";
      }
    }
    text_file("passkey_items.jsonl", lines);
    text_file("passkey_by_depth.svg", passkey_by_depth_svg(r));
  }
  if (r.multi_needle) {
    std::string lines;
    for (size_t c = 0; c < r.multi_needle_outcomes.size(); ++c) {
      for (size_t i = 0; i < r.multi_needle_items.size(); ++i) {
        const MultiNeedleItem& item = r.multi_needle_items[i];
        const MultiNeedleOutcome& o = r.multi_needle_outcomes[c][i];
        nlohmann::json needles = nlohmann::json::array();
        for (const Needle& n : item.needles) {
          needles.push_back({{"name", n.name}, {"value", n.value}, {"depth", n.depth}, {"after", n.after}});
        }
        lines += nlohmann::json({{"config", r.multi_needle->retrieval.configs[c].name},
                                 {"length", item.length},
                                 {"prompt_tokens", item.prompt.size()},
                                 {"depth", item.depth},
                                 {"sample", item.sample},
                                 {"needles", needles},
                                 {"asked", item.asked},
                                 {"output", o.output},
                                 {"pass", o.pass},
                                 {"confused", o.confused}})
                     .dump() + "\n";
      }
    }
    text_file("multineedle_items.jsonl", lines);
    text_file("multineedle_by_depth.svg", multi_needle_by_depth_svg(r));
  }
  return written;
}

}  // namespace nibble::eval
