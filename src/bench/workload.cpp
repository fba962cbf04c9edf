#include "bench/workload.h"

#include <array>
#include <charconv>
#include <limits>

#include "common/error.h"

namespace nibble::bench {
namespace {

constexpr std::array<std::string_view, 64> kWordList = {
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school",
    "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week",
    "company", "system", "program", "question", "work", "number", "night", "point", "home", "water",
    "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book", "eye",
    "job", "word", "business", "issue", "side", "kind", "head", "house", "service", "friend", "father",
    "power", "hour", "game", "line", "end", "member", "law", "car"};

int64_t parse_int(std::string_view text, std::string_view flag_name) {
  int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  NIBBLE_CHECK(ec == std::errc() && ptr == text.data() + text.size(), "{}: '{}' is not an integer", flag_name, text);
  return value;
}

std::vector<int32_t> sample_units(std::mt19937_64& rng, int64_t count, const LengthRange& ids) {
  std::vector<int32_t> units(static_cast<size_t>(count));
  for (int32_t& u : units) u = static_cast<int32_t>(sample_uniform(rng, ids.min, ids.max));
  return units;
}

void check_range(const LengthRange& r, std::string_view name, int64_t min_allowed) {
  NIBBLE_CHECK(r.min >= min_allowed && r.min <= r.max, "{}: range [{}, {}] must satisfy {} <= A <= B", name, r.min,
               r.max, min_allowed);
}

}  // namespace

WorkloadKind parse_workload_kind(std::string_view name) {
  if (name == "random") return WorkloadKind::kRandom;
  if (name == "shared-prefix") return WorkloadKind::kSharedPrefix;
  if (name == "agent") return WorkloadKind::kAgent;
  NIBBLE_FAIL("--workload must be random, shared-prefix or agent, got '{}'", name);
}

std::string_view workload_kind_name(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kRandom: return "random";
    case WorkloadKind::kSharedPrefix: return "shared-prefix";
    case WorkloadKind::kAgent: return "agent";
  }
  return "?";
}

LengthRange parse_length_range(std::string_view text, std::string_view flag_name) {
  const size_t colon = text.find(':');
  LengthRange r;
  if (colon == std::string_view::npos) {
    r.min = r.max = parse_int(text, flag_name);
  } else {
    r.min = parse_int(text.substr(0, colon), flag_name);
    r.max = parse_int(text.substr(colon + 1), flag_name);
  }
  NIBBLE_CHECK(r.min >= 0 && r.min <= r.max, "{}: '{}' must be N or A:B with 0 <= A <= B", flag_name, text);
  return r;
}

int64_t sample_uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  NIBBLE_CHECK(lo <= hi, "sample_uniform: empty range [{}, {}]", lo, hi);
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;  // 0 means all 2^64 values
  if (span == 0) return static_cast<int64_t>(rng());
  // Accept draws below the largest multiple of span, so every residue is equally likely.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % span;
  uint64_t draw = rng();
  while (draw >= limit) draw = rng();
  return lo + static_cast<int64_t>(draw % span);
}

int64_t Turn::prompt_units() const {
  int64_t n = 0;
  for (const Segment& s : segments) n += static_cast<int64_t>(s.units.size());
  return n;
}

std::vector<Session> generate_workload(const WorkloadSpec& spec) {
  check_range(spec.input_len, "--input-len", 1);
  check_range(spec.output_len, "--output-len", 1);
  check_range(spec.token_ids, "--token-ids", 0);
  NIBBLE_CHECK(spec.token_ids.max <= std::numeric_limits<int32_t>::max(), "--token-ids: {} does not fit int32",
               spec.token_ids.max);
  NIBBLE_CHECK(spec.num_requests >= 1, "--num-requests must be >= 1, got {}", spec.num_requests);
  std::mt19937_64 rng(spec.seed);
  std::vector<Session> sessions;

  if (spec.kind == WorkloadKind::kAgent) {
    NIBBLE_CHECK(spec.turns >= 1, "--turns must be >= 1, got {}", spec.turns);
    for (int64_t left = spec.num_requests; left > 0; left -= spec.turns) {
      Session session;
      std::vector<Segment> history;
      for (int64_t t = 0; t < std::min(left, spec.turns); ++t) {
        const int64_t in_len = sample_uniform(rng, spec.input_len.min, spec.input_len.max);
        const int64_t out_len = sample_uniform(rng, spec.output_len.min, spec.output_len.max);
        history.push_back({.role = Role::kUser, .units = sample_units(rng, in_len, spec.token_ids)});
        const int64_t reusable = session.turns.empty() ? 0 : session.turns.back().prompt_units();
        session.turns.push_back({.segments = history, .max_tokens = out_len, .reusable_units = reusable});
        // The synthetic reply stands in for what the server generated (its length is the requested
        // output length); the next turn's prompt extends this one, so a prefix cache can reuse it.
        history.push_back({.role = Role::kAssistant, .units = sample_units(rng, out_len, spec.token_ids)});
      }
      sessions.push_back(std::move(session));
    }
    return sessions;
  }

  std::vector<std::vector<int32_t>> prefixes;
  if (spec.kind == WorkloadKind::kSharedPrefix) {
    NIBBLE_CHECK(spec.prefix_len >= 1, "--prefix-len must be >= 1 for shared-prefix, got {}", spec.prefix_len);
    NIBBLE_CHECK(spec.num_groups >= 1, "--num-groups must be >= 1, got {}", spec.num_groups);
    for (int64_t g = 0; g < spec.num_groups; ++g) prefixes.push_back(sample_units(rng, spec.prefix_len, spec.token_ids));
  }
  for (int64_t i = 0; i < spec.num_requests; ++i) {
    const int64_t in_len = sample_uniform(rng, spec.input_len.min, spec.input_len.max);
    const int64_t out_len = sample_uniform(rng, spec.output_len.min, spec.output_len.max);
    std::vector<int32_t> units;
    if (!prefixes.empty()) units = prefixes[static_cast<size_t>(i % spec.num_groups)];
    const std::vector<int32_t> fresh = sample_units(rng, in_len, spec.token_ids);
    units.insert(units.end(), fresh.begin(), fresh.end());
    const int64_t reusable = !prefixes.empty() && i >= spec.num_groups ? spec.prefix_len : 0;  // group's 2nd on
    sessions.push_back({.turns = {{.segments = {{.role = Role::kUser, .units = std::move(units)}},
                                   .max_tokens = out_len,
                                   .reusable_units = reusable}}});
  }
  return sessions;
}

std::string units_to_words(const std::vector<int32_t>& units) {
  std::string text;
  for (size_t i = 0; i < units.size(); ++i) {
    if (i) text += ' ';
    text += kWordList[static_cast<size_t>(units[i]) % kWordList.size()];
  }
  return text;
}

uint64_t sweep_point_seed(uint64_t seed, size_t point) {
  if (point == 0) return seed;
  // splitmix64's finalizer (a bijection) of seed + an odd constant × point: distinct for distinct
  // points; neither seed itself nor the warm-up's seed for the first 10^5 points (tests).
  uint64_t z = seed + 0xbf58476d1ce4e5b9ULL * static_cast<uint64_t>(point);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace nibble::bench
