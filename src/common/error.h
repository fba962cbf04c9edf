#pragma once
// Errors: throw nibble::Error at boundaries (files, configs, requests, flags) with a message that
// names the problem; NIBBLE_ASSERT for internal invariants that no input can break.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace nibble {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace nibble

// NIBBLE_CHECK(cond, "expected {} got {}", a, b): throws nibble::Error naming the message.
#define NIBBLE_CHECK(cond, ...)                                  \
  do {                                                           \
    if (!(cond)) throw ::nibble::Error(fmt::format(__VA_ARGS__)); \
  } while (0)

// NIBBLE_FAIL("..."): throws unconditionally.
#define NIBBLE_FAIL(...) throw ::nibble::Error(fmt::format(__VA_ARGS__))

// NIBBLE_ASSERT(cond): an internal invariant; a failure is a bug in nibble, reported with file:line.
#define NIBBLE_ASSERT(cond)                                                                   \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::nibble::Error(fmt::format("internal error at {}:{}: {}", __FILE__, __LINE__, #cond)); \
  } while (0)
