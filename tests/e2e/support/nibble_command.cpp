#include "e2e/support/nibble_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iterator>

namespace nibble::test {

namespace fs = std::filesystem;

fs::path nibble_binary() { return fs::path(NIBBLE_BINARY_DIR) / "apps" / "nibble" / "nibble"; }

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";  // close the quote, an escaped quote, reopen
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

fs::path scratch_path(const std::string& name) {
  return fs::temp_directory_path() / ("nibble_e2e_" + std::to_string(::getpid()) + "_" + name);
}

CommandRun run_nibble(const std::string& args) {
  static std::atomic<int> calls{0};
  const std::string tag = "run" + std::to_string(calls++);
  const fs::path out = scratch_path(tag + ".stdout"), err = scratch_path(tag + ".stderr");
  const std::string cmd = shell_quoted(nibble_binary().string()) + " " + args + " > " + shell_quoted(out.string()) +
                          " 2> " + shell_quoted(err.string());
  const int status = std::system(cmd.c_str());
  CommandRun r{.exit_code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1,
               .out = slurp(out),
               .err = slurp(err)};
  fs::remove(out);
  fs::remove(err);
  return r;
}

}  // namespace nibble::test
