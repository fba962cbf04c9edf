#include "engine/engine.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <span>
#include <thread>

#include <fmt/format.h>

#include "backend/step_plan.h"
#include "cache/kv_pool.h"
#include "cache/radix_cache.h"
#include "engine/stop_matcher.h"
#include "runtime/forward_step.h"
#include "scheduler/scheduler.h"

namespace nibble::engine {

using Clock = std::chrono::steady_clock;

struct Engine::Core {
  Core(cache::KvPool kv_pool, const EngineOptions& options)
      : pool(std::move(kv_pool)),
        cache(pool.allocator(), {.page_size = options.page_size, .enabled = options.prefix_cache}),
        scheduler(pool.allocator(), cache,
                  {.max_batch_tokens = options.max_batch_tokens,
                   .max_running = options.max_running,
                   .decode_reserve = options.decode_reserve}) {}
  cache::KvPool pool;
  cache::RadixCache cache;  // on pool's allocator
  scheduler::Scheduler scheduler;
};

struct Engine::Live {
  Live(std::shared_ptr<RequestStream> s, GenerationRequest r, const Tokenizer& tokenizer, Clock::time_point t)
      : stream(std::move(s)),
        request(std::move(r)),
        sampler(request.sampling),
        detok(tokenizer, /*skip_special=*/true),
        stops(request.stop),
        prompt_logprobs(request.prompt_logprobs ? request.prompt.size() : 0),
        submitted(t) {
    usage.prompt_tokens = static_cast<int64_t>(request.prompt.size());
    // The generated text continues the prompt's (a leading space is kept, as in decode(prompt +
    // generated) minus decode(prompt)): run the prompt through the detokenizer, drop its text.
    for (int32_t id : request.prompt) detok.push(id);
  }
  std::shared_ptr<RequestStream> stream;
  GenerationRequest request;
  sampling::Sampler sampler;
  StreamingDetokenizer detok;
  StopMatcher stops;
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;  // [prompt] while scoring
  std::optional<TokenLogprob> sampled_logprob;               // of the token sampled this step
  uint64_t draws = 0;  // tokens sampled so far: the Philox draw index of the next one
  bool sent_first = false;
  bool has_token = false;
  Clock::time_point submitted;
  Clock::time_point last_token;
  Usage usage;
};

// A step whose forward pass is launched and whose tokens are drawn, or being drawn, on the device:
// its plan, the backend's steps and sampling requests (built when its draws are launched).
struct Engine::InFlight {
  scheduler::StepPlan plan;
  std::vector<backend::SequenceStep> steps;  // spans into plan
  backend::Tensor logits;                    // [steps.size(), vocab] on the backend, until the next step
  std::vector<backend::SampleRequest> requests;
};

namespace {

FinishReason from_scheduler(scheduler::FinishReason reason) {
  switch (reason) {
    case scheduler::FinishReason::kNone: return FinishReason::kNone;
    case scheduler::FinishReason::kStop: return FinishReason::kStop;
    case scheduler::FinishReason::kLength: return FinishReason::kLength;
    case scheduler::FinishReason::kCancelled: return FinishReason::kCancelled;
  }
  return FinishReason::kError;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Engine::Engine(runtime::LoadedModel model, Tokenizer tokenizer, const EngineOptions& options)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)), options_(options) {
  NIBBLE_CHECK(options.max_waiting >= 0, "max_waiting must be >= 0, got {}", options.max_waiting);
  max_context_ = model_.config().max_position_embeddings;
  vocab_size_ = model_.config().vocab_size;
  for (int64_t id : model_.config().eos_token_ids) eos_ids_.push_back(static_cast<int32_t>(id));
  for (int32_t id : tokenizer_.eos_ids()) {
    if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
  }
  core_ = std::make_unique<Core>(runtime::make_kv_pool(model_, {.kv_dtype = options.kv_dtype,
                                                                 .rotation = options.rotation,
                                                                 .page_size = options.page_size,
                                                                 .num_pages = options.num_pages,
                                                                 .global_scales = options.global_scales}),
                                 options);
  publish_metrics();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(std::chrono::milliseconds(0)); }

void Engine::validate(const GenerationRequest& r) const {
  const auto reject = [](RejectReason reason, const std::string& message) { throw RequestRejected(reason, message); };
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  if (prompt == 0) reject(RejectReason::kInvalid, "the prompt has no tokens");
  for (int32_t id : r.prompt) {
    if (id < 0 || id >= vocab_size_) {
      reject(RejectReason::kInvalid, fmt::format("token id {} is outside the vocabulary of {}", id, vocab_size_));
    }
  }
  if (r.max_tokens < 0) reject(RejectReason::kInvalid, fmt::format("max_tokens must be >= 0, got {}", r.max_tokens));
  if (prompt + r.max_tokens > max_context_) {
    reject(RejectReason::kContextLength,
           fmt::format("this model's maximum context length is {} tokens, but {} tokens were requested ({} in the "
                       "prompt, {} to generate)",
                       max_context_, prompt + r.max_tokens, prompt, r.max_tokens));
  }
  // The last generated token's KV is never stored (the scheduler's own sizing rule).
  const int64_t kv_tokens = prompt + std::max<int64_t>(r.max_tokens - 1, 0);
  const int64_t pages = (kv_tokens + options_.page_size - 1) / options_.page_size;
  if (pages > options_.num_pages) {
    reject(RejectReason::kContextLength,
           fmt::format("{} prompt + {} generated tokens need {} KV pages, the pool has {} pages ({} tokens)", prompt,
                       r.max_tokens, pages, options_.num_pages, options_.num_pages * options_.page_size));
  }
  static_assert(kMaxTopLogprobs <= backend::kMaxSampleTopLogprobs, "Backend::sample returns every top logprob");
  if (r.top_logprobs < 0 || r.top_logprobs > kMaxTopLogprobs) {
    reject(RejectReason::kInvalid,
           fmt::format("top_logprobs must be between 0 and {}, got {}", kMaxTopLogprobs, r.top_logprobs));
  }
  try {
    sampling::validate(r.sampling);
  } catch (const Error& e) {
    reject(RejectReason::kInvalid, e.what());
  }
}

std::shared_ptr<RequestStream> Engine::submit(GenerationRequest request) {
  validate(request);
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) throw RequestRejected(RejectReason::kShuttingDown, "the engine failed: " + failure_);
    if (!accepting_) throw RequestRejected(RejectReason::kShuttingDown, "the server is shutting down");
    if (static_cast<int64_t>(inbox_.size()) + waiting_snapshot_ >= options_.max_waiting) {
      throw RequestRejected(RejectReason::kBusy, fmt::format("too many requests waiting ({}); retry later",
                                                             static_cast<int64_t>(inbox_.size()) + waiting_snapshot_));
    }
    stream = std::make_shared<RequestStream>(next_id_++);
    inbox_.push_back({.stream = stream, .request = std::move(request), .submitted = Clock::now()});
    idle_now_ = false;
  }
  wake_.notify_one();
  return stream;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard lock(mutex_);
    cancels_.push_back(id);
  }
  wake_.notify_one();
}

void Engine::shutdown(std::chrono::milliseconds grace) {
  std::lock_guard serialized(shutdown_mutex_);  // a second caller returns once the first is done
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
  }
  wait_idle(grace);
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool Engine::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return idle_.wait_for(lock, timeout, [&] { return (idle_now_ && inbox_.empty() && cancels_.empty()) || stop_; });
}

EngineMetrics Engine::metrics() const {
  std::lock_guard lock(mutex_);
  return metrics_;
}

void Engine::loop() {
  while (true) {
    try {
      // stop_ is read before the handover: shutdown() closes submit() (accepting_) before it sets
      // stop_, so once stop_ is seen no request can still be on its way into inbox_ — every one is
      // taken below and gets its last event.
      bool stopping = false;
      {
        std::lock_guard lock(mutex_);
        stopping = stop_;
      }
      take_handovers();
      if (stopping) {
        std::vector<RequestId> ids;
        for (const auto& [id, live] : live_) ids.push_back(id);
        for (RequestId id : ids) end_request(id, FinishReason::kCancelled);
        drop_in_flight();
        core_->scheduler.check_integrity();
        publish_metrics();
        flush_outbox();
        std::lock_guard lock(mutex_);
        idle_now_ = true;
        idle_.notify_all();
        return;
      }
      if (core_->scheduler.idle() && in_flight_ == nullptr) {
        core_->scheduler.check_integrity();
        publish_metrics();
        flush_outbox();
        std::unique_lock lock(mutex_);
        if (inbox_.empty() && cancels_.empty() && !stop_) {
          idle_now_ = true;
          idle_.notify_all();
          wake_.wait(lock, [&] { return !inbox_.empty() || !cancels_.empty() || stop_; });
        }
        continue;
      }
      run_step();
      publish_metrics();  // before the events go out: a client that got its answer sees it in /metrics
      flush_outbox();
    } catch (const std::exception& e) {
      // A failed step: the requests it served get the error; the engine carries on only if its
      // bookkeeping is still sound.
      std::fprintf(stderr, "nibble engine: step failed: %s\n", e.what());
      fail_all(e.what());
      try {
        drop_in_flight();
        core_->scheduler.check_integrity();
      } catch (const std::exception& broken) {
        std::fprintf(stderr, "nibble engine: state corrupt, stopping: %s\n", broken.what());
        flush_outbox();
        std::lock_guard lock(mutex_);
        failure_ = broken.what();
        accepting_ = false;
        idle_now_ = true;
        idle_.notify_all();
        return;
      }
      publish_metrics();
      flush_outbox();
    }
  }
}

void Engine::drop_in_flight() {
  in_flight_.reset();
  core_->scheduler.drop_plans();  // every request has ended: nothing waits for these plans' tokens
}

void Engine::take_handovers() {
  std::deque<Incoming> incoming;
  std::vector<RequestId> cancels;
  {
    std::lock_guard lock(mutex_);
    incoming.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (Incoming& in : incoming) {
    const RequestId id = in.stream->id();
    auto live = std::make_unique<Live>(in.stream, std::move(in.request), tokenizer_, in.submitted);
    scheduler::Request request{.id = id,
                               .prompt = live->request.prompt,
                               .max_tokens = live->request.max_tokens,
                               .stop_ids = live->request.ignore_eos ? std::vector<int32_t>{} : eos_ids_,
                               .compute_whole_prompt = live->request.prompt_logprobs};
    Live& ref = *live;
    live_.emplace(id, std::move(live));
    try {
      core_->scheduler.submit(std::move(request));
      working_.prompt_tokens += ref.usage.prompt_tokens;
    } catch (const Error& e) {
      end_request(id, FinishReason::kError, e.what());
    }
  }
  for (RequestId id : cancels) {
    if (live_.count(id)) end_request(id, FinishReason::kCancelled);
  }
}

void Engine::run_step() {
  scheduler::Scheduler& sched = core_->scheduler;
  if (in_flight_ == nullptr) {
    scheduler::StepPlan plan = sched.step();
    if (plan.empty()) {
      // Not idle but nothing can run this step (should not happen: every accepted request fits the
      // pool alone). Yield instead of spinning.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    std::unique_ptr<InFlight> step = prepare(std::move(plan));
    if (std::any_of(step->steps.begin(), step->steps.end(), [](const auto& s) { return s.all_logits; })) {
      run_with_host_logits(*step);  // prompt scoring: logits come back, nothing stays in flight
      return;
    }
    launch_forward(*step);
    launch_draws(*step);
    in_flight_ = std::move(step);
    return;
  }
  // A step is in flight: plan the next one and launch its forward pass before reading this one's
  // tokens, so that the device runs it while the host handles them (the overlap). Its tokens are
  // drawn once this step's are handled (the requests' draw counts and logprob choices are known then).
  std::unique_ptr<InFlight> next;
  if (options_.overlap) {
    scheduler::StepPlan ahead = sched.step_ahead();
    if (!ahead.empty()) {
      next = prepare(std::move(ahead));
      launch_forward(*next);
      ++working_.overlapped_steps;
    }
  }
  std::unique_ptr<InFlight> done = std::move(in_flight_);
  std::vector<backend::SampledToken> drawn(done->steps.size());
  model_.transformer().backend().sample_wait(drawn);
  finish_step(done->plan, drawn, {});
  if (next != nullptr) {
    launch_draws(*next);
    in_flight_ = std::move(next);
  }
}

std::unique_ptr<Engine::InFlight> Engine::prepare(scheduler::StepPlan plan) {
  auto step = std::make_unique<InFlight>();
  step->plan = std::move(plan);
  step->steps.reserve(step->plan.sequences.size());
  for (const scheduler::ScheduledSequence& seq : step->plan.sequences) {
    const Live& live = *live_.at(seq.request_id);
    const int64_t prompt = static_cast<int64_t>(live.request.prompt.size());
    step->steps.push_back({.first_position = seq.first_position,
                           .tokens = seq.input_tokens,
                           .pages = seq.page_table,
                           .all_logits = live.request.prompt_logprobs && seq.first_position < prompt - 1,
                           .fed_row = seq.fed_row});
  }
  return step;
}

void Engine::launch_forward(InFlight& step) {
  step.logits = runtime::launch_forward_step(model_, core_->pool, options_.rotation, step.steps,
                                             options_.nvfp4_scale_rule);
}

// Every token is drawn by Backend::sample's rule (Philox(seed, draw), draw = tokens sampled so far),
// so a request's stream does not depend on which path its steps take. The sampled token's logprob
// and its top_logprobs alternatives come back with it.
std::vector<backend::SampleRequest> Engine::sample_requests(const scheduler::StepPlan& plan) const {
  std::vector<backend::SampleRequest> requests;
  for (const scheduler::ScheduledSequence& seq : plan.sequences) {
    const auto it = live_.find(seq.request_id);
    if (it == live_.end()) {  // ended while its step was in flight: a draw nobody reads
      requests.push_back({});
      continue;
    }
    const GenerationRequest& r = it->second->request;
    const sampling::SamplingParams& p = r.sampling;
    requests.push_back({.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p,
                        .seed = p.seed, .draw = it->second->draws,
                        .top_logprobs = r.logprobs ? static_cast<int32_t>(r.top_logprobs) : 0});
  }
  return requests;
}

void Engine::launch_draws(InFlight& step) {
  step.requests = sample_requests(step.plan);
  model_.transformer().backend().sample_launch(step.logits, step.requests);
}

void Engine::run_with_host_logits(InFlight& step) {
  const std::vector<float> logits =
      runtime::run_forward_step(model_, core_->pool, options_.rotation, step.steps, options_.nvfp4_scale_rule);
  step.requests = sample_requests(step.plan);
  finish_step(step.plan, {}, logits, step.requests);
}

void Engine::finish_step(const scheduler::StepPlan& plan, std::span<const backend::SampledToken> drawn,
                         std::span<const float> logits, std::span<const backend::SampleRequest> host_requests) {
  scheduler::Scheduler& sched = core_->scheduler;
  const bool host_logits = !logits.empty();
  std::vector<int32_t> sampled;
  int64_t row = 0;  // logits row of the current sequence's first returned position
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const scheduler::ScheduledSequence& seq = plan.sequences[i];
    const auto it = live_.find(seq.request_id);
    Live* live = it == live_.end() ? nullptr : it->second.get();  // null: ended while in flight
    const int64_t n = seq.num_new_tokens;
    const bool all_logits = host_logits && live != nullptr && live->request.prompt_logprobs &&
                            seq.first_position < static_cast<int64_t>(live->request.prompt.size()) - 1;
    const int64_t rows = all_logits ? n : 1;
    NIBBLE_ASSERT(!host_logits || static_cast<int64_t>(logits.size()) >= (row + rows) * vocab_size_);
    const auto row_span = [&](int64_t r) { return logits.subspan(static_cast<size_t>(r * vocab_size_), vocab_size_); };
    if (all_logits) {
      // Row j holds the logits after position first_position + j: they score the next prompt token.
      const std::vector<int32_t>& prompt = live->request.prompt;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t next = seq.first_position + j + 1;
        if (next < static_cast<int64_t>(prompt.size()) && !live->prompt_logprobs[next]) {
          live->prompt_logprobs[next] = token_logprob(row_span(row + j), prompt[next], live->request.top_logprobs);
        }
      }
    }
    if (seq.samples) {
      int32_t token = 0;  // max_tokens 0, or a request already ended: the scheduler ignores the value
      if (live != nullptr && live->request.max_tokens > 0) {
        if (host_logits) {
          const std::span<const float> last = row_span(row + rows - 1);
          const backend::SampledToken t = runtime::sample_host_logits(last, vocab_size_, host_requests.subspan(i, 1))[0];
          token = t.id;
          if (live->request.logprobs) live->sampled_logprob = token_logprob(last, token, live->request.top_logprobs);
        } else {
          token = drawn[i].id;
          if (live->request.logprobs) {
            TokenLogprob lp{.token = token, .logprob = drawn[i].logprob};
            for (int32_t j = 0; j < drawn[i].num_top; ++j) {
              lp.top.push_back({.token = drawn[i].top[j].id, .logprob = drawn[i].top[j].logprob});
            }
            live->sampled_logprob = std::move(lp);
          }
        }
        ++live->draws;
      }
      sampled.push_back(token);
    }
    row += rows;
  }

  const std::vector<scheduler::TokenEvent> events = sched.update(sampled);
  const Clock::time_point now = Clock::now();
  for (const scheduler::TokenEvent& ev : events) {
    Live& live = *live_.at(ev.id);
    live.usage.cached_tokens = ev.cached_prompt_tokens;
    EngineEvent out;
    FinishReason finish = from_scheduler(ev.finish);
    if (ev.token >= 0) {
      out.tokens = {ev.token};
      if (live.sampled_logprob) out.logprobs = {std::move(*live.sampled_logprob)};
      live.sampled_logprob.reset();
      live.usage.completion_tokens = ev.generated_tokens;
      ++working_.generated_tokens;
      if (!live.has_token) {
        working_.time_to_first_token.observe(seconds_between(live.submitted, now));
      } else {
        working_.inter_token_latency.observe(seconds_between(live.last_token, now));
      }
      live.has_token = true;
      live.last_token = now;
      StopMatch match = live.stops.push(live.detok.push(ev.token));
      out.text = std::move(match.text);
      if (match.stopped) {
        if (finish == FinishReason::kNone) sched.finish(ev.id, scheduler::FinishReason::kStop);
        finish = FinishReason::kStop;
      } else if (finish != FinishReason::kNone) {
        StopMatch tail = live.stops.push(live.detok.finish());
        out.text += tail.text;
        if (tail.stopped) {
          finish = FinishReason::kStop;
        } else {
          out.text += live.stops.flush();
        }
      }
    }
    out.finish = finish;
    deliver(live, std::move(out));
  }
}

void Engine::deliver(Live& live, EngineEvent event) {
  if (!live.sent_first && live.request.prompt_logprobs) event.prompt_logprobs = std::move(live.prompt_logprobs);
  live.sent_first = true;
  event.usage = live.usage;
  const FinishReason finish = event.finish;
  const RequestId id = live.stream->id();
  outbox_.emplace_back(live.stream, std::move(event));
  if (finish == FinishReason::kNone) return;
  if (finish == FinishReason::kCancelled) {
    ++working_.requests_cancelled;
  } else if (finish == FinishReason::kError) {
    ++working_.requests_failed;
  } else {
    ++working_.requests_finished;
  }
  live_.erase(id);  // destroys `live`
}

void Engine::end_request(RequestId id, FinishReason reason, const std::string& error) {
  NIBBLE_ASSERT(reason == FinishReason::kCancelled || reason == FinishReason::kError);
  Live& live = *live_.at(id);
  core_->scheduler.cancel(id);  // false when it never reached the scheduler
  EngineEvent event;
  event.finish = reason;
  event.error = error;
  deliver(live, std::move(event));
}

void Engine::fail_all(const std::string& message) {
  std::vector<RequestId> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (RequestId id : ids) end_request(id, FinishReason::kError, message);
}

void Engine::flush_outbox() {
  for (auto& [stream, event] : outbox_) stream->push(std::move(event));
  outbox_.clear();
}

void Engine::publish_metrics() {
  const cache::PageAllocator& allocator = core_->pool.allocator();
  const scheduler::SchedulerStats& stats = core_->scheduler.stats();
  working_.kv_pages_total = allocator.num_pages();
  working_.kv_pages_free = allocator.num_free();
  working_.kv_pages_cached = core_->cache.cached_pages();
  working_.kv_pages_evictable = core_->cache.evictable_pages();
  working_.kv_pages_requests = allocator.num_used() - core_->cache.cached_pages();
  working_.page_size = options_.page_size;
  working_.running_requests = core_->scheduler.num_running();
  working_.prefix_cache_hit_tokens = stats.prefix_hit_tokens;
  working_.preemptions = stats.preemptions;
  working_.steps = stats.steps;
  std::lock_guard lock(mutex_);
  waiting_snapshot_ = core_->scheduler.num_waiting();
  const scheduler::QueueBlock block = core_->scheduler.queue_block();
  working_.waiting_for_pages = block == scheduler::QueueBlock::kPages ? waiting_snapshot_ : 0;
  working_.waiting_for_running_cap = block == scheduler::QueueBlock::kRunningCap ? waiting_snapshot_ : 0;
  working_.waiting_requests = waiting_snapshot_ + static_cast<int64_t>(inbox_.size());
  metrics_ = working_;
}

}  // namespace nibble::engine
