#pragma once
// expect_error(f, part): f must throw a nibble::Error whose message contains `part` (a gtest
// failure otherwise, naming what was expected and what was said).
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace nibble::test_support {

template <typename F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error, expected a nibble::Error mentioning '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "message '" << e.what() << "' lacks '" << part << "'";
  }
}

}  // namespace nibble::test_support
