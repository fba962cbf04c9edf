#pragma once
// A small fixed thread pool with one operation: parallel_for over [0, n). Owned by its user (the
// CPU backend); no global state. parallel_for blocks until every index ran; calls from several
// threads at once are serialized. An exception in a task is rethrown by parallel_for.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nibble::backend {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // 0 = std::thread::hardware_concurrency(); 1 = run inline
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs fn(i) for every i in [0, n), indices handed out dynamically; the caller's thread helps.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void worker_loop();
  void run_indices();

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t next_ = 0;
  int64_t generation_ = 0;
  int busy_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace nibble::backend
