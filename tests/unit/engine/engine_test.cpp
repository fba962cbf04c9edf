// The engine on the CPU backend with models/stories260k. Oracles: the golden greedy ids of
// llama2.c's run.c (models/stories260k/golden.json), each request run alone (for batching,
// preemption and seeded sampling), the golden text (stop strings), and Session's single-sequence
// all-logits prefill (what `nibble score` computes) for prompt scoring.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "runtime/session.h"

namespace nibble::engine {
namespace {

using namespace std::chrono_literals;
const std::string kModelDir = NIBBLE_SOURCE_DIR "/models/stories260k";

struct GoldenCase {
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  std::string generated_text;
  bool bos_in_continuation = false;
};

std::vector<GoldenCase> golden_cases() {
  std::ifstream in(kModelDir + "/golden.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<GoldenCase> cases;
  for (const auto& c : j["cases"]) {
    cases.push_back({.prompt = c["prompt_ids"].get<std::vector<int32_t>>(),
                     .generated = c["generated_ids"].get<std::vector<int32_t>>(),
                     .generated_text = c["generated_text"].get<std::string>(),
                     .bos_in_continuation = !c["bos_positions_in_generated"].empty()});
  }
  return cases;
}

std::unique_ptr<Engine> make_engine(EngineOptions options) {
  return std::make_unique<Engine>(runtime::load_model({.dir = kModelDir, .num_threads = 1, .progress = false}),
                                   Tokenizer::load(kModelDir), options);
}

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;
  std::vector<TokenLogprob> logprobs;  // of the generated tokens, when asked for
  FinishReason finish = FinishReason::kNone;
  Usage usage;
};

Collected collect(RequestStream& stream) {
  Collected out;
  while (true) {
    std::optional<EngineEvent> event = stream.next(60s);
    if (!event) {
      ADD_FAILURE() << "request " << stream.id() << " produced no event in 60 s";
      return out;
    }
    out.tokens.insert(out.tokens.end(), event->tokens.begin(), event->tokens.end());
    out.logprobs.insert(out.logprobs.end(), event->logprobs.begin(), event->logprobs.end());
    out.text += event->text;
    if (!event->prompt_logprobs.empty()) out.prompt_logprobs = event->prompt_logprobs;
    out.usage = event->usage;
    if (event->finish != FinishReason::kNone) {
      out.finish = event->finish;
      return out;
    }
  }
}

GenerationRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  return {.prompt = std::move(prompt), .max_tokens = max_tokens, .ignore_eos = true};
}

TEST(Engine, GreedyMatchesGoldenIds) {
  auto engine = make_engine({.num_pages = 128});
  for (const GoldenCase& c : golden_cases()) {
    auto stream = engine->submit(greedy(c.prompt, static_cast<int64_t>(c.generated.size())));
    const Collected got = collect(*stream);
    EXPECT_EQ(got.tokens, c.generated);
    EXPECT_EQ(got.finish, FinishReason::kLength);
    EXPECT_EQ(got.usage.completion_tokens, static_cast<int64_t>(c.generated.size()));
    EXPECT_EQ(got.usage.prompt_tokens, static_cast<int64_t>(c.prompt.size()));
    if (!c.bos_in_continuation) EXPECT_EQ(got.text, c.generated_text);
  }
  ASSERT_TRUE(engine->wait_idle(10s));
  EXPECT_EQ(engine->metrics().kv_pages_requests, 0);
}

// 30 requests at once (greedy and seeded sampling), a running cap and a pool small enough to force
// preemption: each must produce exactly what it produces alone.
TEST(Engine, ConcurrentRequestsMatchAlone) {
  const std::vector<GoldenCase> cases = golden_cases();
  std::vector<GenerationRequest> requests;
  for (int copy = 0; copy < 5; ++copy) {
    for (const GoldenCase& c : cases) {
      GenerationRequest r = greedy(c.prompt, 48);
      if (copy % 2 == 1) r.sampling = {.temperature = 0.9f, .top_p = 0.95f, .seed = static_cast<uint64_t>(copy)};
      requests.push_back(r);
    }
  }
  std::vector<Collected> alone;
  {
    auto engine = make_engine({.num_pages = 64, .prefix_cache = false});
    for (const GenerationRequest& r : requests) alone.push_back(collect(*engine->submit(r)));
  }
  for (size_t i = 0; i < cases.size(); ++i) {  // the greedy ones are also the golden prefix
    EXPECT_EQ(alone[i].tokens, std::vector<int32_t>(cases[i].generated.begin(), cases[i].generated.begin() + 48));
  }
  // 20 pages of 16 tokens: 320 tokens for 30 requests of up to 67 tokens -> preemption.
  auto engine = make_engine({.num_pages = 20, .max_running = 8, .max_batch_tokens = 40});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const GenerationRequest& r : requests) streams.push_back(engine->submit(r));
  for (size_t i = 0; i < streams.size(); ++i) {
    const Collected got = collect(*streams[i]);
    EXPECT_EQ(got.tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(got.text, alone[i].text) << "request " << i;
  }
  ASSERT_TRUE(engine->wait_idle(10s));
  const EngineMetrics m = engine->metrics();
  EXPECT_GT(m.preemptions, 0);
  EXPECT_GT(m.prefix_cache_hit_tokens, 0);  // the copies share prompts
  EXPECT_EQ(m.kv_pages_requests, 0);
  EXPECT_EQ(m.kv_pages_free + m.kv_pages_cached, m.kv_pages_total);
  EXPECT_EQ(m.requests_finished, 30);
}

// The overlap (EngineOptions::overlap: each step planned and launched while the previous one's
// tokens are drawn, its inputs fed from those draws) against the engine without it: the same tokens,
// text, logprobs (to rounding) and finish reasons for greedy and seeded requests with EOS, stop strings, logprobs
// and max_tokens, run together; and the overlap must actually have happened.
TEST(Engine, OverlappedStepsMatchSequentialSteps) {
  const std::vector<GoldenCase> cases = golden_cases();
  std::vector<GenerationRequest> requests;
  for (int copy = 0; copy < 3; ++copy) {
    for (const GoldenCase& c : cases) {
      GenerationRequest r{.prompt = c.prompt, .max_tokens = 20 + 9 * copy};
      if (copy == 1) r.sampling = {.temperature = 0.8f, .top_k = 20, .seed = 7};
      if (copy == 2) r.stop = {" the"};
      r.logprobs = copy != 0;
      r.top_logprobs = copy == 1 ? 3 : 0;
      requests.push_back(r);
    }
  }
  auto run = [&](bool overlap) {
    auto engine = make_engine({.num_pages = 48, .max_running = 6, .max_batch_tokens = 64, .overlap = overlap});
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const GenerationRequest& r : requests) streams.push_back(engine->submit(r));
    std::vector<Collected> got;
    for (auto& s : streams) got.push_back(collect(*s));
    EXPECT_TRUE(engine->wait_idle(10s));
    const EngineMetrics m = engine->metrics();
    EXPECT_EQ(m.kv_pages_requests, 0);
    EXPECT_EQ(m.requests_finished, static_cast<int64_t>(requests.size()));
    return std::pair{got, m.overlapped_steps};
  };
  const auto [sequential, none] = run(false);
  const auto [overlapped, overlaps] = run(true);
  EXPECT_EQ(none, 0);
  EXPECT_GT(overlaps, 20) << "steps were hardly ever overlapped";
  int stopped = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(overlapped[i].tokens, sequential[i].tokens) << "request " << i;
    EXPECT_EQ(overlapped[i].text, sequential[i].text) << "request " << i;
    EXPECT_EQ(overlapped[i].finish, sequential[i].finish) << "request " << i;
    EXPECT_EQ(overlapped[i].usage.completion_tokens, sequential[i].usage.completion_tokens) << "request " << i;
    ASSERT_EQ(overlapped[i].logprobs.size(), sequential[i].logprobs.size()) << "request " << i;
    EXPECT_EQ(overlapped[i].logprobs.size(), requests[i].logprobs ? overlapped[i].tokens.size() : 0u);
    for (size_t t = 0; t < overlapped[i].logprobs.size(); ++t) {
      const TokenLogprob &a = overlapped[i].logprobs[t], &b = sequential[i].logprobs[t];
      EXPECT_EQ(a.token, b.token);
      // The batches differ (a request that stops has computed one position more), and the CPU's
      // matrix products round by batch shape: the same tokens, logprobs to float rounding.
      EXPECT_NEAR(a.logprob, b.logprob, 1e-4 * std::max(1.0f, std::fabs(b.logprob))) << "request " << i << " token " << t;
      ASSERT_EQ(a.top.size(), b.top.size());
      for (size_t k = 0; k < a.top.size(); ++k) EXPECT_EQ(a.top[k].token, b.top[k].token);
    }
    stopped += sequential[i].finish == FinishReason::kStop ? 1 : 0;
  }
  EXPECT_GT(stopped, 0) << "no request stopped early (EOS or a stop string): the cases test less than meant";
}

TEST(Engine, CancellationFreesPages) {
  auto engine = make_engine({.num_pages = 64});
  const GoldenCase c = golden_cases()[1];
  auto stream = engine->submit(greedy(c.prompt, 400));
  std::optional<EngineEvent> first = stream->next(60s);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->finish, FinishReason::kNone);
  EXPECT_GT(engine->metrics().kv_pages_requests + engine->metrics().kv_pages_cached, 0);
  engine->cancel(stream->id());
  Collected rest = collect(*stream);
  EXPECT_EQ(rest.finish, FinishReason::kCancelled);
  ASSERT_TRUE(engine->wait_idle(10s));
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.kv_pages_requests, 0);
  EXPECT_EQ(m.kv_pages_free, m.kv_pages_total);  // a cancelled request caches nothing
  EXPECT_EQ(m.requests_cancelled, 1);
  engine->cancel(stream->id());  // unknown by now: ignored
  EXPECT_EQ(collect(*engine->submit(greedy(c.prompt, 5))).tokens,
            std::vector<int32_t>(c.generated.begin(), c.generated.begin() + 5));
}

TEST(Engine, StopStringsAcrossTokens) {
  auto engine = make_engine({.num_pages = 64});
  const GoldenCase c = golden_cases()[0];  // "Once upon a time, there was a little girl named Lily. ..."
  for (const std::string stop : {"little girl", "ly. Sh", "time,", "O"}) {
    const size_t cut = c.generated_text.find(stop);
    ASSERT_NE(cut, std::string::npos);
    GenerationRequest r = greedy(c.prompt, 200);
    r.stop = {"never appears \x01", stop};
    const Collected got = collect(*engine->submit(r));
    EXPECT_EQ(got.text, c.generated_text.substr(0, cut)) << stop;
    EXPECT_EQ(got.finish, FinishReason::kStop) << stop;
    // Generation ran up to the token completing the stop string, and no further.
    ASSERT_LE(got.tokens.size(), c.generated.size());
    EXPECT_EQ(got.tokens, std::vector<int32_t>(c.generated.begin(), c.generated.begin() + got.tokens.size()));
    const std::string before = engine->tokenizer().decode(
        std::span<const int32_t>(got.tokens).first(got.tokens.size() - 1), /*skip_special=*/true);
    EXPECT_LT(before.size(), cut + stop.size()) << "the stop string was already complete one token earlier";
  }
  ASSERT_TRUE(engine->wait_idle(10s));
  EXPECT_EQ(engine->metrics().kv_pages_requests, 0);
}

TEST(Engine, EosStopsUnlessIgnored) {
  auto engine = make_engine({.num_pages = 64});
  const GoldenCase c = golden_cases()[3];  // emits BOS (id 1) at 189; stories260k's EOS is id 2
  GenerationRequest r = greedy(c.prompt, 200);
  r.ignore_eos = false;
  const Collected got = collect(*engine->submit(r));
  const auto eos = std::find(c.generated.begin(), c.generated.end(), 2);
  if (eos == c.generated.end()) {
    EXPECT_EQ(got.tokens, c.generated);
  } else {
    EXPECT_EQ(got.tokens, std::vector<int32_t>(c.generated.begin(), eos + 1));
    EXPECT_EQ(got.finish, FinishReason::kStop);
  }
}

std::vector<double> session_logprobs(const std::vector<int32_t>& ids) {
  runtime::LoadedModel model = runtime::load_model({.dir = kModelDir, .num_threads = 1, .progress = false});
  runtime::Session session(model, {.max_context = static_cast<int64_t>(ids.size())});
  const std::vector<float> logits = session.prefill(ids, {.all_logits = true});
  const int64_t vocab = model.config().vocab_size;
  std::vector<double> out;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const float* row = logits.data() + i * vocab;
    double m = row[0], sum = 0;
    for (int64_t v = 0; v < vocab; ++v) m = std::max(m, static_cast<double>(row[v]));
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - m);
    out.push_back(row[ids[i + 1]] - m - std::log(sum));
  }
  return out;
}

TEST(Engine, PromptScoringMatchesSessionLogprobs) {
  const GoldenCase c = golden_cases()[2];
  std::vector<int32_t> ids = c.prompt;
  ids.insert(ids.end(), c.generated.begin(), c.generated.begin() + 100);
  const std::vector<double> want = session_logprobs(ids);
  // Small chunks and a warm prefix cache holding the same tokens: scoring must still compute every
  // position itself.
  auto engine = make_engine({.num_pages = 64, .max_batch_tokens = 24});
  collect(*engine->submit(greedy(ids, 1)));
  GenerationRequest score{.prompt = ids, .max_tokens = 0, .top_logprobs = 2, .prompt_logprobs = true};
  const Collected got = collect(*engine->submit(score));
  EXPECT_EQ(got.finish, FinishReason::kLength);
  EXPECT_TRUE(got.tokens.empty());
  EXPECT_EQ(got.usage.completion_tokens, 0);
  EXPECT_EQ(got.usage.cached_tokens, 0);
  ASSERT_EQ(got.prompt_logprobs.size(), ids.size());
  EXPECT_FALSE(got.prompt_logprobs[0].has_value());
  for (size_t i = 1; i < ids.size(); ++i) {
    ASSERT_TRUE(got.prompt_logprobs[i].has_value()) << i;
    EXPECT_EQ(got.prompt_logprobs[i]->token, ids[i]);
    EXPECT_NEAR(got.prompt_logprobs[i]->logprob, want[i - 1], 1e-4) << "position " << i;
    ASSERT_EQ(got.prompt_logprobs[i]->top.size(), 2u);
    EXPECT_GE(got.prompt_logprobs[i]->top[0].logprob, got.prompt_logprobs[i]->logprob - 1e-6);
  }
}

TEST(Engine, RejectsWhatCannotRun) {
  auto engine = make_engine({.num_pages = 8, .max_waiting = 1});
  const auto reason = [&](GenerationRequest r) {
    try {
      engine->submit(std::move(r));
    } catch (const RequestRejected& e) {
      return static_cast<int>(e.reason());
    }
    return -1;
  };
  EXPECT_EQ(reason(greedy({}, 1)), static_cast<int>(RejectReason::kInvalid));
  EXPECT_EQ(reason(greedy({1, 9999}, 1)), static_cast<int>(RejectReason::kInvalid));
  EXPECT_EQ(reason(greedy({1}, 600)), static_cast<int>(RejectReason::kContextLength));   // > 512 context
  EXPECT_EQ(reason(greedy({1}, 200)), static_cast<int>(RejectReason::kContextLength));   // > 8 pages
  GenerationRequest bad = greedy({1}, 1);
  bad.sampling.top_p = 2.0f;
  EXPECT_EQ(reason(bad), static_cast<int>(RejectReason::kInvalid));
  engine->shutdown(0ms);
  EXPECT_EQ(reason(greedy({1}, 1)), static_cast<int>(RejectReason::kShuttingDown));
}


TEST(Engine, ShutdownWithGraceFinishesEveryAcceptedRequest) {
  // Two run, four wait: the queued ones are admitted and finish during the grace too.
  auto engine = make_engine({.num_pages = 64, .max_running = 2});
  const GoldenCase c = golden_cases()[1];
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) streams.push_back(engine->submit(greedy(c.prompt, 40)));
  engine->shutdown(60s);
  for (auto& stream : streams) {
    const Collected got = collect(*stream);
    EXPECT_EQ(got.finish, FinishReason::kLength);
    EXPECT_EQ(got.tokens, std::vector<int32_t>(c.generated.begin(), c.generated.begin() + 40));
  }
  EXPECT_EQ(engine->metrics().requests_finished, 6);
}

TEST(Engine, ShutdownAfterTheGraceCancelsAndEveryStreamEnds) {
  // Submitted from several threads while shutdown() runs: every request submit() accepted gets a
  // last event (finished or cancelled), every other one was refused with kShuttingDown.
  for (int round = 0; round < 5; ++round) {
    auto engine = make_engine({.num_pages = 256, .max_running = 4});
    std::mutex mutex;
    std::vector<std::shared_ptr<RequestStream>> accepted;
    std::atomic<int> refused{0};
    std::vector<std::thread> clients;
    for (int t = 0; t < 4; ++t) {
      clients.emplace_back([&] {
        for (int i = 0; i < 20; ++i) {
          try {
            auto stream = engine->submit(greedy({1, 403}, 300));
            std::lock_guard lock(mutex);
            accepted.push_back(std::move(stream));
          } catch (const RequestRejected& e) {
            EXPECT_EQ(e.reason(), RejectReason::kShuttingDown) << e.what();
            ++refused;
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(round));
    engine->shutdown(0ms);
    for (std::thread& t : clients) t.join();
    int cancelled = 0;
    for (auto& stream : accepted) {
      const std::optional<EngineEvent> last = [&]() -> std::optional<EngineEvent> {
        while (auto event = stream->next(0ms)) {
          if (event->finish != FinishReason::kNone) return event;
        }
        return std::nullopt;  // nothing more queued: no last event
      }();
      ASSERT_TRUE(last.has_value()) << "request " << stream->id() << " never ended (round " << round << ")";
      EXPECT_TRUE(last->finish == FinishReason::kLength || last->finish == FinishReason::kCancelled);
      cancelled += last->finish == FinishReason::kCancelled ? 1 : 0;
    }
    EXPECT_EQ(static_cast<int>(accepted.size()) + refused, 80);
    const EngineMetrics m = engine->metrics();
    EXPECT_EQ(m.requests_cancelled, cancelled);
    EXPECT_EQ(m.kv_pages_requests, 0);
  }
}

}  // namespace
}  // namespace nibble::engine
