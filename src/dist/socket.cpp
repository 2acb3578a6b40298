// POSIX sockets behind socket.hpp.
#include "socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace meshrun::dist_detail {
namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Resolves host:port; the error text is gai_strerror's when it fails.
AddrInfoPtr resolve(const std::string& host, int port, bool passive, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int status = getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (status != 0) {
    error = status == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(status);
    return nullptr;
  }
  return AddrInfoPtr(result);
}

int milliseconds_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left + 1, 1 << 30));
}

std::string numeric_address(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof text);
  else if (address.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text, sizeof text);
  return text;
}

ConnectOutcome outcome_of(int error) {
  switch (error) {
    case ECONNREFUSED: return ConnectOutcome::refused;
    case ETIMEDOUT: return ConnectOutcome::timed_out;
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EADDRNOTAVAIL: return ConnectOutcome::unreachable;
    default: return ConnectOutcome::failed;
  }
}

// One non-blocking connect to `address`, waiting at most until `deadline`.
ConnectAttempt connect_one(const addrinfo& address, Clock::time_point deadline) {
  ConnectAttempt attempt;
  Socket socket(::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC, address.ai_protocol));
  if (!socket.valid()) {
    attempt.reason = std::strerror(errno);
    return attempt;
  }
  set_nonblocking(socket.fd());
  int error = 0;
  if (::connect(socket.fd(), address.ai_addr, address.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      error = errno;
    } else {
      pollfd waiting{socket.fd(), POLLOUT, 0};
      int ready;
      do ready = ::poll(&waiting, 1, milliseconds_until(deadline));
      while (ready < 0 && errno == EINTR);
      if (ready == 0) {
        error = ETIMEDOUT;
      } else {
        socklen_t length = sizeof error;
        getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &error, &length);
      }
    }
  }
  if (error != 0) {
    attempt.outcome = outcome_of(error);
    attempt.reason = std::strerror(error);
    return attempt;
  }
  const int one = 1;
  setsockopt(socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  attempt.socket = std::move(socket);
  attempt.outcome = ConnectOutcome::connected;
  return attempt;
}

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

int Socket::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string endpoint_text(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

void check_port(int port, std::string_view source, bool allow_any) {
  if (port == 0 && allow_any) return;
  if (port < 1 || port > 65535)
    throw DistError("malformed master port " + std::to_string(port) + " (" + std::string(source) +
                    "): a TCP port is between 1 and 65535");
}

Socket listen_on(const std::string& host, int port) {
  check_port(port, "listen port", true);
  const std::string where = endpoint_text(host, port);
  std::string error;
  AddrInfoPtr addresses = resolve(host, port, true, error);
  if (!addresses)
    throw DistError("rank 0 cannot listen on " + where + ": cannot resolve '" + host + "': " + error);
  int last_error = 0;
  for (const addrinfo* address = addresses.get(); address; address = address->ai_next) {
    Socket socket(::socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, address->ai_protocol));
    if (!socket.valid()) {
      last_error = errno;
      continue;
    }
    // Lets a restarted job rebind while old connections sit in TIME_WAIT; a
    // port another process listens on still fails with EADDRINUSE.
    const int one = 1;
    setsockopt(socket.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(socket.fd(), address->ai_addr, address->ai_addrlen) != 0 || ::listen(socket.fd(), 1024) != 0) {
      last_error = errno;
      continue;
    }
    set_nonblocking(socket.fd());
    return socket;
  }
  std::string hint;
  if (last_error == EADDRINUSE)
    hint = " (another process, perhaps another job, holds this port: choose a free one with "
           "launch.master_port or MASTER_PORT)";
  else if (last_error == EADDRNOTAVAIL)
    hint = " (" + host + " is not an address of this machine: rank 0 must run on the host the master "
           "address names)";
  throw DistError("rank 0 cannot listen on " + where + " for the rendezvous: " + std::strerror(last_error) + hint);
}

int bound_port(const Socket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6&>(address).sin6_port);
  return 0;
}

std::string local_address(const Socket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) return {};
  return numeric_address(address);
}

ConnectAttempt try_connect(const std::string& host, int port, std::chrono::milliseconds attempt_timeout) {
  std::string error;
  AddrInfoPtr addresses = resolve(host, port, false, error);
  if (!addresses) {
    ConnectAttempt attempt;
    attempt.outcome = ConnectOutcome::unresolvable;
    attempt.reason = error;
    return attempt;
  }
  const Clock::time_point deadline = Clock::now() + attempt_timeout;
  ConnectAttempt last;
  for (const addrinfo* address = addresses.get(); address; address = address->ai_next) {
    last = connect_one(*address, deadline);
    if (last.outcome == ConnectOutcome::connected) break;
  }
  return last;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

void send_all(int fd, const void* data, std::size_t size, Clock::time_point deadline) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t sent = ::send(fd, bytes, size, MSG_NOSIGNAL);
    if (sent > 0) {
      bytes += sent;
      size -= static_cast<std::size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd waiting{fd, POLLOUT, 0};
      const int ready = ::poll(&waiting, 1, milliseconds_until(deadline));
      if (ready == 0) throw SocketError(SocketError::Failure::timed_out, "timed out sending");
      continue;
    }
    throw SocketError(errno == EPIPE || errno == ECONNRESET ? SocketError::Failure::closed : SocketError::Failure::failed,
                      std::strerror(errno));
  }
}

void receive_all(int fd, void* data, std::size_t size, Clock::time_point deadline) {
  char* bytes = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t received = ::recv(fd, bytes, size, 0);
    if (received > 0) {
      bytes += received;
      size -= static_cast<std::size_t>(received);
      continue;
    }
    if (received == 0) throw SocketError(SocketError::Failure::closed, "the connection was closed");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd waiting{fd, POLLIN, 0};
      const int ready = ::poll(&waiting, 1, milliseconds_until(deadline));
      if (ready == 0) throw SocketError(SocketError::Failure::timed_out, "no reply in time");
      continue;
    }
    throw SocketError(errno == ECONNRESET ? SocketError::Failure::closed : SocketError::Failure::failed,
                      std::strerror(errno));
  }
}

}  // namespace meshrun::dist_detail
