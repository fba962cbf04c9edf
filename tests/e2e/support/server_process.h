#pragma once
// A `nibble serve` child process for the HTTP tests: started on 127.0.0.1 with --port 0 (the kernel
// picks a free port, read back from the start-up log line) and --threads 1, its stdout and stderr in
// a log file; the destructor stops it (SIGTERM, SIGKILL after 10 s) and reaps it, so no test leaves
// a server running.
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace nibble::test {

class ServerProcess {
 public:
  // Throws std::runtime_error if the server does not report its port within `startup`.
  explicit ServerProcess(const std::vector<std::string>& extra_args,
                         std::chrono::seconds startup = std::chrono::seconds(60));
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  std::string base_url() const;  // "http://127.0.0.1:<port>"
  std::string log() const;  // the server's stderr so far
  void signal(int sig);
  // Waits for the process to exit; returns its wait status, or -1 on a timeout.
  int wait_exit(std::chrono::seconds timeout);

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

}  // namespace nibble::test
