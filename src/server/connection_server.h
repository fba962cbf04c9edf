#pragma once
// httplib::Server with nibble's own connection loop. httplib (Debian 12 ships 0.11.4) serves each
// accepted socket in Server::process_and_close_socket, its one virtual hook for that; overriding it
// gives the HTTP server three things the library does not:
//   1. a handler admitted to the DrainGate (admit_current_request()) stays counted until
//      process_request returns — only then is its response, chunked or not, fully written — so
//      shutdown can wait for every response before httplib's stop(), which cuts a chunked
//      response mid-stream;
//   2. while the gate is closed, idle kept-alive connections are closed at once instead of after
//      the keep-alive timeout, and responses carry "Connection: close";
//   3. a handler can see its own connection (current_connection_fd()) and notice a client that
//      went away while it waits for the engine (0.11.4 has no Request::is_connection_closed).
#include <httplib.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <string>

#include "server/drain_gate.h"

namespace nibble::server {

struct SocketTimeouts {
  std::chrono::microseconds read{std::chrono::seconds(CPPHTTPLIB_READ_TIMEOUT_SECOND)};
  std::chrono::microseconds write{std::chrono::seconds(CPPHTTPLIB_WRITE_TIMEOUT_SECOND)};
};

// One accepted TCP connection as an httplib::Stream. Reads go through a 4 KiB buffer (httplib's
// request parser reads a byte at a time); a read or a write waits at most its timeout.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, SocketTimeouts timeouts) : fd_(fd), timeouts_(timeouts) {}
  bool is_readable() const override;  // input buffered, or the socket readable within the read timeout
  bool is_writable() const override;  // writable within the write timeout, and the peer still there
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return fd_; }
  bool has_buffered_input() const { return begin_ < end_; }

 private:
  int fd_;
  SocketTimeouts timeouts_;
  std::array<char, 4096> buffer_{};
  size_t begin_ = 0;  // unread input is buffer_[begin_, end_)
  size_t end_ = 0;
};

// True when the peer of connected socket `fd` closed or reset the connection (end of file or an
// error pending), false while it is open; input sent but not yet read counts as open. Never blocks.
bool peer_gone(int fd);

class ConnectionServer : public httplib::Server {
 public:
  explicit ConnectionServer(DrainGate& gate) : gate_(gate) {}
  int listening_fd() const { return svr_sock_; }
  // From a handler: admits its request to the gate (false once the gate is closed: answer 503 and
  // start nothing). An admitted request leaves the gate when its response has been written.
  bool admit_current_request();
  // The socket of the request the calling thread is handling; -1 outside a handler.
  static int current_connection_fd();

 private:
  bool process_and_close_socket(socket_t sock) override;
  // Waits for the next request's first byte: false when the keep-alive timeout passes, the peer
  // closes, or the gate is closed with nothing pending.
  bool wait_for_request(const ConnectionStream& stream) const;

  DrainGate& gate_;
};

}  // namespace nibble::server
