#pragma once
// Shared helpers for the config tests: paths to the config files under tests/data/configs.
#include <filesystem>
#include <string>

#include "common/error.h"
#include "config/model_config.h"

namespace nibble::config::testing {

inline std::filesystem::path config_path(const std::string& name) {
  return std::filesystem::path(NIBBLE_SOURCE_DIR) / "tests/data/configs" / name;
}

inline ModelConfig load(const std::string& name) { return load_model_config(config_path(name)); }

// The message of the nibble::Error that loading `name` throws ("" if none is thrown).
inline std::string load_error(const std::filesystem::path& path) {
  try {
    load_model_config(path);
  } catch (const nibble::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace nibble::config::testing
