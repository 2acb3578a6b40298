// TCP sockets for the rendezvous store: listening bound to one address,
// connecting with a per-attempt deadline, and whole-message I/O against a
// deadline. Every failure becomes a DistError whose text names the endpoint
// and the system's reason, because these are the errors a user sees when the
// master address or port is wrong.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "meshrun/dist/dist.hpp"

namespace meshrun::dist_detail {

using Clock = std::chrono::steady_clock;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void close();

 private:
  int fd_ = -1;
};

// A broken or timed-out connection. The store client turns it into "rank 0
// is gone" errors.
class SocketError : public DistError {
 public:
  enum class Failure { closed, timed_out, failed };
  SocketError(Failure failure, const std::string& message) : DistError(message), failure_(failure) {}
  Failure failure() const { return failure_; }

 private:
  Failure failure_;
};

// "host:port", with brackets around an IPv6 literal.
std::string endpoint_text(const std::string& host, int port);

// Throws DistError unless 1 <= port <= 65535 (0 too when allow_any).
void check_port(int port, std::string_view source, bool allow_any = false);

// A listening socket bound to host:port only (port 0: any free port).
// Throws DistError at once when the address cannot be resolved or bound.
Socket listen_on(const std::string& host, int port);
int bound_port(const Socket& socket);
// The numeric address of this end of a connected socket: the address of the
// interface that reaches the peer.
std::string local_address(const Socket& socket);

enum class ConnectOutcome { connected, refused, timed_out, unreachable, unresolvable, failed };

struct ConnectAttempt {
  Socket socket;
  ConnectOutcome outcome = ConnectOutcome::failed;
  std::string reason;  // strerror / gai_strerror text when not connected
};

// One connection attempt to every address `host` resolves to, bounded by
// attempt_timeout.
ConnectAttempt try_connect(const std::string& host, int port, std::chrono::milliseconds attempt_timeout);

void set_nonblocking(int fd);
// Blocking-style I/O on a non-blocking socket; throws SocketError.
void send_all(int fd, const void* data, std::size_t size, Clock::time_point deadline);
void receive_all(int fd, void* data, std::size_t size, Clock::time_point deadline);

}  // namespace meshrun::dist_detail
