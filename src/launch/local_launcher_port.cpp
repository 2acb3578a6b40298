// Ports for the rendezvous of a local run, and the path of meshrun itself.
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "meshrun/launch/launcher.hpp"

namespace meshrun {
namespace {

struct AddressList {
  addrinfo* head = nullptr;
  ~AddressList() {
    if (head) ::freeaddrinfo(head);
  }
};

struct Socket {
  int fd = -1;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

// Binds a TCP socket to the first address `address` resolves to and `port`.
// Returns the port bound (the kernel's choice for port 0), or -1 with
// `error` set.
int bind_port(const std::string& address, int port, bool reuse_address, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  AddressList addresses;
  const auto service = std::to_string(port);
  if (const int status = ::getaddrinfo(address.empty() ? nullptr : address.c_str(), service.c_str(), &hints,
                                       &addresses.head);
      status != 0) {
    error = fmt::format("cannot resolve '{}': {}", address, ::gai_strerror(status));
    return -1;
  }
  for (addrinfo* entry = addresses.head; entry; entry = entry->ai_next) {
    Socket socket{::socket(entry->ai_family, entry->ai_socktype | SOCK_CLOEXEC, entry->ai_protocol)};
    if (socket.fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int on = 1;
    if (reuse_address) ::setsockopt(socket.fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(socket.fd, entry->ai_addr, entry->ai_addrlen) != 0) {
      error = std::strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    if (::getsockname(socket.fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
      error = std::strerror(errno);
      continue;
    }
    if (bound.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    if (bound.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    error = "unexpected address family";
  }
  return -1;
}

}  // namespace

int choose_free_port(const std::string& address) {
  std::string error;
  const int port = bind_port(address, 0, false, error);
  if (port <= 0) throw LaunchError(fmt::format("cannot find a free TCP port on '{}': {}", address, error));
  return port;
}

bool port_is_free(const std::string& address, int port) {
  if (port < 1 || port > 65535) throw std::logic_error(fmt::format("{} is not a TCP port", port));
  std::string error;
  return bind_port(address, port, true, error) == port;
}

std::string this_executable_path() {
  std::error_code error;
  auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw LaunchError("cannot find the path of this program: " + error.message());
  return path.string();
}

}  // namespace meshrun
