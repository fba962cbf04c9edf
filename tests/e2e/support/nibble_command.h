#pragma once
// Running the built `nibble` binary as a user does, for the e2e tests: one shell command line, its
// stdout and stderr captured in temporary files and read back, its exit code decoded.
//
//   const CommandRun r = run_nibble("generate --model " + shell_quoted(dir) + " --prompt hi");
//   EXPECT_EQ(r.exit_code, 0) << r.err;
#include <filesystem>
#include <string>

namespace nibble::test {

std::filesystem::path nibble_binary();  // <build>/apps/nibble/nibble

struct CommandRun {
  int exit_code = -1;  // the process' exit status; -1 if it did not exit (killed by a signal)
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs `nibble <args>` through /bin/sh: `args` are shell words (quote paths and text with
// shell_quoted). Thread-safe: every call captures into files of its own.
CommandRun run_nibble(const std::string& args);

std::string shell_quoted(const std::string& s);  // one shell word holding exactly s

std::string slurp(const std::filesystem::path& path);  // the whole file, bytes as they are ("" if missing)

// A path in the temp directory, unique to this test process: <tmp>/nibble_e2e_<pid>_<name>.
std::filesystem::path scratch_path(const std::string& name);

}  // namespace nibble::test
