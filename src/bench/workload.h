#pragma once
// Synthetic, seeded workloads. A workload is a list of sessions; a session is a list of turns sent one
// after the other (random and shared-prefix sessions have one turn; agent sessions have several).
//
// Sampling, exactly: every length given as a range A:B is drawn uniformly from the integers A..B
// inclusive (a fixed N is the range N:N), by rejection sampling on the 64-bit outputs of
// std::mt19937_64 seeded with --seed (so the numbers are the same on every platform; unlike
// std::uniform_int_distribution, whose algorithm is library-defined). Token ids are drawn the same
// way from the id range. Draw order per session: for each turn, input length, output length, then
// the input's ids; an agent turn then draws its synthetic assistant reply's ids. Shared-prefix
// groups draw their prefixes first, before any session.
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace nibble::bench {

enum class WorkloadKind { kRandom, kSharedPrefix, kAgent };
WorkloadKind parse_workload_kind(std::string_view name);  // "random" | "shared-prefix" | "agent"
std::string_view workload_kind_name(WorkloadKind kind);

// An inclusive integer range [min, max]; "N" parses to [N, N], "A:B" to [A, B]; A <= B, A >= 0.
struct LengthRange {
  int64_t min = 0;
  int64_t max = 0;
};
LengthRange parse_length_range(std::string_view text, std::string_view flag_name);

// Uniform integer on [lo, hi] (inclusive) from rng, unbiased (rejection of the top partial bucket).
int64_t sample_uniform(std::mt19937_64& rng, int64_t lo, int64_t hi);

enum class Role { kUser, kAssistant };

// One message of a prompt: its role and its content as "units" (token ids; the words form of a prompt
// maps each unit to a word, see prompt_words).
struct Segment {
  Role role = Role::kUser;
  std::vector<int32_t> units;
};

struct Turn {
  std::vector<Segment> segments;  // the whole prompt: for agent turns the history, then the new input
  int64_t max_tokens = 0;         // requested output length
  // Units at the prompt's start that an earlier request sent at the start of its own: the most a
  // prefix cache can serve. Agent turns: the previous turn's whole prompt (not the synthetic reply
  // after it, which the server never saw: it generated its own); shared-prefix requests after the
  // first of their group: the group's prefix; otherwise 0.
  int64_t reusable_units = 0;
  int64_t prompt_units() const;   // total units over segments
};

struct Session {
  std::vector<Turn> turns;
};

struct WorkloadSpec {
  WorkloadKind kind = WorkloadKind::kRandom;
  LengthRange input_len{128, 128};   // new input per turn (per request for random/shared-prefix)
  LengthRange output_len{128, 128};  // max_tokens per turn
  int64_t prefix_len = 0;            // shared-prefix: length of each group's common prefix
  int64_t num_groups = 1;            // shared-prefix: number of distinct prefixes; request i uses group i % G
  int64_t turns = 1;                 // agent: turns per session
  int64_t num_requests = 1;          // total turns over all sessions (agent: the last session may be shorter)
  uint64_t seed = 0;
  LengthRange token_ids{3, 499};     // ids drawn from here (default avoids Llama's specials 0..2)
};

// Validates the spec (nibble::Error naming the bad field) and generates the sessions.
std::vector<Session> generate_workload(const WorkloadSpec& spec);

// The seed of point `point` of a --sweep: `seed` itself for the first point (a single run is
// unchanged), a different one for each later point, so that no point sends the prompts an earlier
// one left in the server's prefix cache (a sweep of one workload measured a warm cache after its
// first point). The warm-up's seed (seed ^ kWarmupSeedMix) is none of them.
inline constexpr uint64_t kWarmupSeedMix = 0x9e3779b97f4a7c15ULL;
uint64_t sweep_point_seed(uint64_t seed, size_t point);

// The words form of a prompt: unit u becomes kWordList[u % size], words joined by single spaces.
// Used for /v1/chat/completions (which takes text); a word is roughly one token for most tokenizers,
// the report uses the server's usage.prompt_tokens for the true count.
std::string units_to_words(const std::vector<int32_t>& units);

}  // namespace nibble::bench
