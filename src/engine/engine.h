#pragma once
// Engine: the serving loop. It owns the loaded model (and its backend), the KV pool, the prefix
// cache, the scheduler and one engine thread that repeats
//   1. take new requests and cancellations handed over by other threads;
//   2. plan = scheduler.step()                  (check_integrity() runs there whenever idle)
//   3. the model over the plan, one token drawn on the backend per finishing sequence (Philox per
//      request), logprobs; logits come to the host only for prompt scoring
//   4. scheduler.update(tokens)                  (EOS ids, max_tokens)
//   5. detokenize, match stop strings (scheduler.finish on a match), push events to each request's
//      RequestStream.
// Overlapped (EngineOptions::overlap, the default): once a step's forward pass and draws are
// launched, the next step is planned (Scheduler::step_ahead) and launched, its inputs the tokens
// still being drawn (fed on the device), before 4 and 5 run for the first; so the device does not
// wait for the host between steps. A request that stops on a token has then computed one position
// more, whose result is dropped.
// Everything but submit/cancel/metrics/shutdown runs on the engine thread; the scheduler, cache
// and pool are touched by nothing else.
//
//   Engine engine(runtime::load_model({.dir = dir}), Tokenizer::load(dir), {.num_pages = 256});
//   auto stream = engine.submit({.prompt = ids, .max_tokens = 32});
//   while (auto event = stream->next(1s)) { print(event->text); if (event->finish != kNone) break; }
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/page_layout.h"
#include "common/error.h"
#include "engine/metrics.h"
#include "engine/request_stream.h"
#include "quant/kv_format.h"
#include "backend/backend.h"
#include "runtime/loaded_model.h"
#include "scheduler/step_plan.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace nibble::engine {

struct EngineOptions {
  quant::KvDtype kv_dtype = quant::KvDtype::kF32;
  quant::Rotation rotation = quant::Rotation::kNone;
  int64_t page_size = 16;          // tokens per KV page
  int64_t num_pages = 0;           // KV pool pages, >= 1
  int64_t max_running = 64;        // requests decoding at once
  int64_t max_waiting = 1024;      // submitted but not admitted; more are refused (kBusy)
  int64_t max_batch_tokens = 512;  // tokens per step (decodes + prefill chunks)
  double decode_reserve = 0.0;     // admission's reserve for growth, [0, 1] (scheduler::SchedulerConfig)
  bool prefix_cache = true;
  cache::KvGlobalScales global_scales{};  // per-layer K/V g (from --kv-scales); empty = 1.0
  quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6;  // 4-over-6: CPU only
  bool overlap = true;  // plan and launch the next step before handling this one's tokens (file comment)
};

struct GenerationRequest {
  std::vector<int32_t> prompt;           // token ids, >= 1
  int64_t max_tokens = 16;               // >= 0; 0 = only the prompt is computed (scoring)
  sampling::SamplingParams sampling;     // per request, its own seeded RNG
  std::vector<std::string> stop;         // stop strings (cut from the text, not returned)
  bool ignore_eos = false;               // do not stop at the model's EOS ids
  bool logprobs = false;                 // logprob of every generated token
  int64_t top_logprobs = 0;              // and of the n most probable alternatives, 0..kMaxTopLogprobs
  bool prompt_logprobs = false;          // logprobs of the prompt tokens (computes every prompt position)
};

inline constexpr int64_t kMaxTopLogprobs = 20;

// Why submit() refused a request; the HTTP layer maps these to status codes.
enum class RejectReason : uint8_t {
  kInvalid,        // a bad field (message names it)
  kContextLength,  // prompt (+ max_tokens) longer than the context
  kBusy,           // too many waiting requests
  kShuttingDown,   // shutdown() started, or the engine failed
};

class RequestRejected : public Error {
 public:
  RequestRejected(RejectReason reason, const std::string& message) : Error(message), reason_(reason) {}
  RejectReason reason() const { return reason_; }

 private:
  RejectReason reason_;
};

class Engine {
 public:
  // Builds the pool (options.num_pages pages in the backend's memory) and starts the engine thread.
  // Throws nibble::Error on bad options (format vs head_dim, sizes).
  Engine(runtime::LoadedModel model, Tokenizer tokenizer, const EngineOptions& options);
  ~Engine();  // shutdown(0): cancels what is still running
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Any thread. Throws RequestRejected (nothing queued) for an invalid request, one that cannot fit
  // the context or the pool, a full queue, or after shutdown() began.
  std::shared_ptr<RequestStream> submit(GenerationRequest request);

  // Any thread: the request stops and frees its pages; its stream gets a final kCancelled event
  // (unless it already finished). Unknown ids are ignored.
  void cancel(RequestId id);

  // Stop accepting requests (submit() throws kShuttingDown), let the admitted and queued ones run
  // for up to `grace`, cancel the rest and stop the engine thread. On return every request ever
  // accepted has its last event in its stream. Idempotent; any thread but the engine's.
  void shutdown(std::chrono::milliseconds grace);

  // Waits until nothing is running, waiting or handed over (true), or the timeout (false).
  bool wait_idle(std::chrono::milliseconds timeout);

  EngineMetrics metrics() const;  // a copy, published after every step
  const config::ModelConfig& model_config() const { return model_.config(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const EngineOptions& options() const { return options_; }
  int64_t max_context() const { return max_context_; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  struct Live;      // a request the engine thread is serving
  struct Core;      // pool + cache + scheduler, engine thread only
  struct InFlight;  // a launched step whose tokens are not handled yet
  struct Incoming {
    std::shared_ptr<RequestStream> stream;
    GenerationRequest request;
    std::chrono::steady_clock::time_point submitted;
  };

  void validate(const GenerationRequest& request) const;
  void loop();
  void take_handovers();
  void run_step();
  // The steps of run_step(): the backend's view of a plan; its forward pass launched; its draws
  // launched (the requests' draw counts as they are now); a prompt-scoring step run to the end;
  // the tokens (drawn, or sampled from host logits) handed to the scheduler and the streams.
  std::unique_ptr<InFlight> prepare(scheduler::StepPlan plan);
  void launch_forward(InFlight& step);
  std::vector<backend::SampleRequest> sample_requests(const scheduler::StepPlan& plan) const;
  void launch_draws(InFlight& step);
  void run_with_host_logits(InFlight& step);
  void finish_step(const scheduler::StepPlan& plan, std::span<const backend::SampledToken> drawn,
                   std::span<const float> logits, std::span<const backend::SampleRequest> host_requests = {});
  // After every request ended: forgets the step in flight and the scheduler's plans.
  void drop_in_flight();
  void deliver(Live& live, EngineEvent event);
  void end_request(RequestId id, FinishReason reason, const std::string& error = {});
  void fail_all(const std::string& message);
  void publish_metrics();
  void flush_outbox();  // pushes the events deliver() queued, after publish_metrics()

  runtime::LoadedModel model_;
  Tokenizer tokenizer_;
  EngineOptions options_;
  int64_t max_context_ = 0;
  int64_t vocab_size_ = 0;
  std::vector<int32_t> eos_ids_;
  std::unique_ptr<Core> core_;
  std::unique_ptr<InFlight> in_flight_;  // engine thread only
  std::unordered_map<RequestId, std::unique_ptr<Live>> live_;  // engine thread only
  std::vector<std::pair<std::shared_ptr<RequestStream>, EngineEvent>> outbox_;  // engine thread only

  std::mutex shutdown_mutex_;  // serializes shutdown() (the join)

  // Handover between threads.
  mutable std::mutex mutex_;
  std::condition_variable wake_;   // engine thread: work arrived or stop
  std::condition_variable idle_;   // wait_idle()
  std::deque<Incoming> inbox_;
  std::vector<RequestId> cancels_;
  bool accepting_ = true;
  bool stop_ = false;
  bool idle_now_ = true;
  std::string failure_;             // set when the engine thread died of an error
  RequestId next_id_ = 1;
  int64_t waiting_snapshot_ = 0;    // scheduler's waiting count after the last step
  EngineMetrics metrics_;          // the published copy
  EngineMetrics working_;          // engine thread only; copied to metrics_ by publish_metrics()
  std::thread thread_;
};

}  // namespace nibble::engine
