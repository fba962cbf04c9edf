#include "e2e/support/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "e2e/support/nibble_command.h"

namespace nibble::test {

ServerProcess::ServerProcess(const std::vector<std::string>& extra_args, std::chrono::seconds startup) {
  char path[] = "/tmp/nibble-serve-log-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  log_path_ = path;
  std::vector<std::string> args = {nibble_binary().string(), "serve", "--host", "127.0.0.1", "--port", "0",
                                   "--threads", "1"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fd, STDERR_FILENO);
    dup2(fd, STDOUT_FILENO);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fd);
  const auto deadline = std::chrono::steady_clock::now() + startup;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string text = log();
    const size_t at = text.find("listening on http://127.0.0.1:");
    if (at != std::string::npos) {
      port_ = std::atoi(text.c_str() + at + std::string("listening on http://127.0.0.1:").size());
      if (port_ > 0) return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("nibble serve exited at start-up: " + text);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string text = log();
  kill(pid_, SIGKILL);  // the destructor will not run for a constructor that throws
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  unlink(log_path_.c_str());
  throw std::runtime_error("nibble serve did not report a port: " + text);
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    if (wait_exit(std::chrono::seconds(10)) == -1 && pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  unlink(log_path_.c_str());
}

std::string ServerProcess::base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

std::string ServerProcess::log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void ServerProcess::signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

int ServerProcess::wait_exit(std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

}  // namespace nibble::test
