#include "server/connection_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace nibble::server {

namespace {

using std::chrono::milliseconds;

// While a connection is idle, how often it looks at the gate (a closed gate ends idle connections).
constexpr milliseconds kIdleSlice{50};

// The request this thread is serving: its socket, and whether its handler was admitted to the gate.
struct CurrentRequest {
  int fd = -1;
  bool admitted = false;
};
thread_local CurrentRequest t_current;

// poll() for `events` up to `timeout`, retried on EINTR: > 0 ready, 0 timeout, < 0 error.
int wait_for(int fd, short events, std::chrono::microseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{.fd = fd, .events = events, .revents = 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (n >= 0 || errno != EINTR) return n;
  }
}

void numeric_address(const sockaddr_storage& addr, socklen_t len, std::string& ip, int& port) {
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) ==
      0) {
    ip = host;
  }
  if (addr.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  } else if (addr.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  }
}

// Publishes the request to its handler while process_request runs; then lets an admitted one out of
// the gate (its response is written by then).
class RequestScope {
 public:
  RequestScope(int fd, DrainGate& gate) : gate_(gate) { t_current = {.fd = fd, .admitted = false}; }
  ~RequestScope() {
    if (t_current.admitted) gate_.leave();
    t_current = {};
  }
  RequestScope(const RequestScope&) = delete;
  RequestScope& operator=(const RequestScope&) = delete;

 private:
  DrainGate& gate_;
};

}  // namespace

bool ConnectionStream::is_readable() const {
  return has_buffered_input() || wait_for(fd_, POLLIN, timeouts_.read) > 0;
}

bool ConnectionStream::is_writable() const { return wait_for(fd_, POLLOUT, timeouts_.write) > 0 && !peer_gone(fd_); }

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (!has_buffered_input()) {
    if (!is_readable()) return -1;
    char* into = size >= buffer_.size() ? ptr : buffer_.data();  // large reads skip the buffer
    const size_t want = size >= buffer_.size() ? size : buffer_.size();
    ssize_t n = 0;
    do {
      n = ::recv(fd_, into, want, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0 || into == ptr) return n;
    begin_ = 0;
    end_ = static_cast<size_t>(n);
  }
  const size_t n = std::min(size, end_ - begin_);
  std::memcpy(ptr, buffer_.data() + begin_, n);
  begin_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  if (!is_writable()) return -1;
  ssize_t n = 0;
  do {
    n = ::send(fd_, ptr, size, MSG_NOSIGNAL);  // a client gone is an error return, not SIGPIPE
  } while (n < 0 && errno == EINTR);
  return n;
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) numeric_address(addr, len, ip, port);
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) numeric_address(addr, len, ip, port);
}

bool peer_gone(int fd) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  const int ready = ::poll(&p, 1, 0);
  if (ready == 0) return false;  // nothing pending: open
  if (ready < 0) return errno != EINTR;
  if (p.revents & POLLNVAL) return true;
  char byte = 0;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // unread input (a pipelined request): open
  if (n == 0) return true;  // end of file: the client closed
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset, or another error
}

int ConnectionServer::current_connection_fd() { return t_current.fd; }

bool ConnectionServer::admit_current_request() {
  NIBBLE_ASSERT(t_current.fd >= 0 && !t_current.admitted);  // once, from a handler
  if (!gate_.try_enter()) return false;
  t_current.admitted = true;
  return true;
}

bool ConnectionServer::wait_for_request(const ConnectionStream& stream) const {
  if (stream.has_buffered_input()) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
  while (std::chrono::steady_clock::now() < deadline) {
    const int ready = wait_for(stream.socket(), POLLIN, kIdleSlice);
    if (ready < 0) return false;
    if (ready > 0) return !peer_gone(stream.socket());
    if (gate_.closed()) return false;  // idle while shutting down: nothing in flight here
  }
  return false;
}

bool ConnectionServer::process_and_close_socket(socket_t sock) {
  const SocketTimeouts timeouts{.read = std::chrono::seconds(read_timeout_sec_) +
                                        std::chrono::microseconds(read_timeout_usec_),
                                .write = std::chrono::seconds(write_timeout_sec_) +
                                         std::chrono::microseconds(write_timeout_usec_)};
  ConnectionStream stream(sock, timeouts);
  bool ok = true;
  for (size_t served = 0; served < keep_alive_max_count_; ++served) {
    if (!wait_for_request(stream)) break;
    const bool last = served + 1 == keep_alive_max_count_ || gate_.closed();
    bool connection_closed = false;
    {
      RequestScope scope(sock, gate_);  // process_request returns once the response is written
      ok = process_request(stream, last, connection_closed, nullptr);
    }
    if (!ok || connection_closed) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace nibble::server
