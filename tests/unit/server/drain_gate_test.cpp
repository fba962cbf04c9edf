// DrainGate, the counter behind the HTTP server's graceful shutdown: a request admitted while the
// gate was open keeps wait_empty() waiting until it leaves; after close() nothing is admitted, and
// refused requests (a flood of them) do not hold up the wait.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "server/drain_gate.h"

namespace nibble::server {
namespace {

using namespace std::chrono_literals;

TEST(DrainGate, WaitsForEveryAdmittedRequest) {
  DrainGate gate;
  EXPECT_TRUE(gate.wait_empty(0ms));
  ASSERT_TRUE(gate.try_enter());
  ASSERT_TRUE(gate.try_enter());
  gate.close();
  EXPECT_TRUE(gate.closed());
  EXPECT_FALSE(gate.try_enter());
  EXPECT_EQ(gate.in_flight(), 2);
  EXPECT_FALSE(gate.wait_empty(10ms));
  gate.leave();
  EXPECT_FALSE(gate.wait_empty(10ms));
  std::thread last([&] {
    std::this_thread::sleep_for(20ms);
    gate.leave();
  });
  EXPECT_TRUE(gate.wait_empty(10s));
  EXPECT_EQ(gate.in_flight(), 0);
  last.join();
  gate.close();  // idempotent
  EXPECT_TRUE(gate.closed());
}

TEST(DrainGate, NoAdmittedRequestOutlivesTheWaitEvenUnderAFlood) {
  // Handlers loop: try to be admitted, "write" for a while, leave. Shutdown: close, wait. After the
  // wait nothing may still be writing, and the wait must end although handlers keep knocking.
  for (int round = 0; round < 50; ++round) {
    DrainGate gate;
    std::atomic<int> writing{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> handlers;
    for (int t = 0; t < 4; ++t) {
      handlers.emplace_back([&] {
        while (!stop) {
          if (!gate.try_enter()) continue;  // answers 503 at once
          ++writing;
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          --writing;
          gate.leave();
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100 * (round % 10)));
    gate.close();
    const bool emptied = gate.wait_empty(10s);
    const int still_writing = writing.load();
    stop = true;
    for (std::thread& t : handlers) t.join();
    EXPECT_TRUE(emptied) << "round " << round;
    EXPECT_EQ(still_writing, 0) << "round " << round << ": a response was still being written after the wait";
  }
}

}  // namespace
}  // namespace nibble::server
