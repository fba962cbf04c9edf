// nibble: one binary, subcommands. Each lives in cmd_<name>.cpp; this file only wires them up,
// prints --version, and turns a nibble::Error into a message and a non-zero exit.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "common/error.h"
#include "nibble/build_info.h"

#define NIBBLE_COMMAND(name) void add_##name##_command(CLI::App& app);
#include "commands.inc"
#undef NIBBLE_COMMAND

namespace {

std::string version_text() {
  using namespace nibble::build;
  if (kCuda) {
    return fmt::format("nibble {} (CUDA on, architectures {}; {} build)", kVersion, kCudaArchitectures,
                       kBuildType);
  }
  return fmt::format("nibble {} (CUDA off; CPU backend only; {} build)", kVersion, kBuildType);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nibble: an LLM inference engine with a 4-bit (NVFP4) KV cache"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
#define NIBBLE_COMMAND(name) add_##name##_command(app);
#include "commands.inc"
#undef NIBBLE_COMMAND
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const nibble::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "nibble: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "nibble: unexpected error: {}\n", e.what());
    return 2;
  }
  return 0;
}
