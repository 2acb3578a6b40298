// One poll loop serves every store connection; see store_server.hpp.
#include "store_server.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sha256.hpp"
#include "socket.hpp"
#include "store_protocol.hpp"

namespace meshrun::dist_detail {
// Named, not anonymous: StoreServer::Impl (external linkage) holds these, and
// in a unity build GCC warns (-Wsubobject-linkage) about anonymous ones.
namespace store_server_state {

struct Entry {
  std::string value;
  Clock::time_point written;
};

struct Connection {
  Socket socket;
  std::string input, output;
  std::string nonce;
  bool authenticated = false;
  bool close_after_flush = false;
  bool waiting = false;  // a parked get/wait: read nothing more until it is answered
};

struct Waiter {
  int fd = -1;
  StoreOp op = StoreOp::wait;
  std::vector<std::string> keys;
  Clock::time_point deadline;
};

}  // namespace store_server_state
using store_server_state::Connection;
using store_server_state::Entry;
using store_server_state::Waiter;

namespace {

// Before a connection proves the job token it may send the auth frame and
// nothing else (a few dozen bytes): anything past this is dropped, so a
// stranger cannot make the store buffer a 256 MiB frame per connection.
constexpr size_t kMaxUnauthenticatedBytes = 4096;
// Connections not yet authenticated, at most; more are closed on accept (a
// job's ranks authenticate at once, so only a flood reaches this).
constexpr size_t kMaxUnauthenticatedConnections = 1024;

std::string random_nonce() {
  std::random_device device;
  std::string nonce(16, '\0');
  for (char& byte : nonce) byte = static_cast<char>(device() & 0xff);
  return nonce;
}

}  // namespace

struct StoreServer::Impl {
  std::string host;
  std::string token;
  Socket listener;
  int port = 0;
  int wake_fd = -1;
  std::thread thread;

  std::unordered_map<std::string, Entry> entries;
  std::map<int, Connection> connections;
  std::vector<Waiter> waiters;

  ~Impl() {
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void run() {
    std::vector<pollfd> fds;
    while (true) {
      fds.clear();
      fds.push_back({wake_fd, POLLIN, 0});
      fds.push_back({listener.fd(), POLLIN, 0});
      for (auto& [fd, connection] : connections) {
        short events = POLLRDHUP;  // a parked client that dies is noticed at once
        if (!connection.waiting && !connection.close_after_flush) events |= POLLIN;
        if (!connection.output.empty()) events |= POLLOUT;
        fds.push_back({fd, events, 0});
      }
      int ready;
      do ready = ::poll(fds.data(), fds.size(), poll_timeout_ms());
      while (ready < 0 && errno == EINTR);
      if (fds[0].revents & POLLIN) return;
      if (fds[1].revents & POLLIN) accept_all();
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        try {
          service(fds[i].fd, fds[i].revents);
        } catch (const std::exception&) {
          drop(fds[i].fd);  // e.g. out of memory serving it: that connection, not the job's store
        }
      }
      expire_waiters();
    }
  }

  int poll_timeout_ms() const {
    if (waiters.empty()) return -1;
    Clock::time_point first = waiters.front().deadline;
    for (const auto& waiter : waiters) first = std::min(first, waiter.deadline);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(first - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left + 1, 0, 60'000));
  }

  void accept_all() {
    while (true) {
      const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;  // EAGAIN, or a transient error: poll tells us when to retry
      if (unauthenticated_connections() >= kMaxUnauthenticatedConnections) {
        ::close(fd);
        continue;
      }
      Connection& connection = connections[fd];
      connection.socket = Socket(fd);
      connection.nonce = random_nonce();
      connection.output = MessageWriter()
                              .u8(static_cast<std::uint8_t>(StoreStatus::ok))
                              .bytes(kStoreBanner)
                              .bytes(connection.nonce)
                              .frame();
    }
  }

  size_t unauthenticated_connections() const {
    return static_cast<size_t>(std::count_if(connections.begin(), connections.end(),
                                             [](const auto& item) { return !item.second.authenticated; }));
  }

  void service(int fd, short events) {
    auto it = connections.find(fd);
    if (it == connections.end()) return;
    Connection& connection = it->second;
    if (events & POLLOUT) flush(connection);
    if (events & POLLIN) {
      char buffer[65536];
      while (true) {
        const ssize_t received = ::recv(fd, buffer, sizeof buffer, 0);
        if (received > 0) {
          connection.input.append(buffer, static_cast<size_t>(received));
          // One whole frame and the start of the next at most (frames are
          // handled below, after this read).
          const size_t limit = connection.authenticated ? 4 + size_t{kMaxFrameBytes} + sizeof buffer
                                                        : kMaxUnauthenticatedBytes;
          if (connection.input.size() > limit && connection.authenticated) {
            process_input(fd);  // the frames already whole, before reading on
            if (!connections.count(fd)) return;
          }
          if (connection.input.size() > limit) {
            drop(fd);
            return;
          }
          continue;
        }
        if (received < 0 && errno == EINTR) continue;
        if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        drop(fd);  // closed by the peer, or an error
        return;
      }
      process_input(fd);
      if (!connections.count(fd)) return;
    } else if (events & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) {
      drop(fd);
      return;
    }
    auto again = connections.find(fd);
    if (again != connections.end() && again->second.close_after_flush && again->second.output.empty()) drop(fd);
  }

  void flush(Connection& connection) {
    while (!connection.output.empty()) {
      const ssize_t sent = ::send(connection.socket.fd(), connection.output.data(), connection.output.size(),
                                  MSG_NOSIGNAL);
      if (sent > 0) {
        connection.output.erase(0, static_cast<size_t>(sent));
        continue;
      }
      if (sent < 0 && errno == EINTR) continue;
      return;  // EAGAIN: wait for POLLOUT; an error shows up as POLLERR/POLLHUP
    }
  }

  void drop(int fd) {
    waiters.erase(std::remove_if(waiters.begin(), waiters.end(), [fd](const Waiter& w) { return w.fd == fd; }),
                  waiters.end());
    connections.erase(fd);
  }

  void process_input(int fd) {
    while (true) {
      auto it = connections.find(fd);
      if (it == connections.end()) return;
      Connection& connection = it->second;
      if (connection.waiting || connection.close_after_flush || connection.input.size() < 4) break;
      const std::uint32_t length = frame_length(connection.input.data());
      if (length > kMaxFrameBytes) {
        drop(fd);
        return;
      }
      if (connection.input.size() < 4 + size_t{length}) break;
      const std::string payload = connection.input.substr(4, length);
      connection.input.erase(0, 4 + size_t{length});
      try {
        handle(fd, connection, payload);
      } catch (const ProtocolError&) {
        drop(fd);
        return;
      }
    }
    auto it = connections.find(fd);
    if (it != connections.end()) flush(it->second);
  }

  void reply(Connection& connection, const MessageWriter& message) { connection.output += message.frame(); }

  static MessageWriter status(StoreStatus value) { return MessageWriter().u8(static_cast<std::uint8_t>(value)); }

  void handle(int fd, Connection& connection, const std::string& payload) {
    MessageReader request(payload);
    const auto op = static_cast<StoreOp>(request.u8());
    if (!connection.authenticated) {
      std::string proof = op == StoreOp::auth ? request.bytes() : std::string();
      const Sha256Digest expected = hmac_sha256(token, connection.nonce);
      Sha256Digest given{};
      const bool well_formed = proof.size() == given.size();
      if (well_formed) std::copy(proof.begin(), proof.end(), given.begin());
      if (op == StoreOp::auth && well_formed && digests_equal(expected, given)) {
        connection.authenticated = true;
        reply(connection, status(StoreStatus::ok));
      } else {
        reply(connection, status(StoreStatus::refused)
                              .bytes(op == StoreOp::auth ? "job token mismatch"
                                                         : "the first request must prove the job token"));
        connection.close_after_flush = true;
      }
      return;
    }
    switch (op) {
      case StoreOp::set: {
        std::string key = request.bytes();
        write(std::move(key), request.bytes());
        reply(connection, status(StoreStatus::ok));
        break;
      }
      case StoreOp::get: {
        std::string key = request.bytes();
        const std::int64_t timeout_ms = request.i64();
        park_or_answer(fd, connection, StoreOp::get, {std::move(key)}, timeout_ms);
        break;
      }
      case StoreOp::add: {
        std::string key = request.bytes();
        const std::int64_t delta = request.i64();
        std::int64_t value = delta;
        if (auto found = entries.find(key); found != entries.end()) {
          try {
            value += std::stoll(found->second.value);
          } catch (const std::exception&) {
            reply(connection, status(StoreStatus::error).bytes("add on key '" + key + "' whose value is not a number"));
            break;
          }
        }
        write(std::move(key), std::to_string(value));
        reply(connection, status(StoreStatus::ok).i64(value));
        break;
      }
      case StoreOp::compare_set: {
        std::string key = request.bytes();
        std::string expected = request.bytes();
        std::string desired = request.bytes();
        auto found = entries.find(key);
        if (found == entries.end()) {
          if (!expected.empty()) {
            reply(connection, status(StoreStatus::ok).bytes(expected));
            break;
          }
        } else if (found->second.value != expected) {
          reply(connection, status(StoreStatus::ok).bytes(found->second.value));
          break;
        }
        write(std::move(key), desired);
        reply(connection, status(StoreStatus::ok).bytes(desired));
        break;
      }
      case StoreOp::check: {
        const auto keys = request.strings();
        reply(connection, status(StoreStatus::ok).u8(missing(keys).empty() ? 1 : 0));
        break;
      }
      case StoreOp::wait: {
        auto keys = request.strings();
        const std::int64_t timeout_ms = request.i64();
        park_or_answer(fd, connection, StoreOp::wait, std::move(keys), timeout_ms);
        break;
      }
      case StoreOp::remove: {
        const std::string key = request.bytes();
        reply(connection, status(StoreStatus::ok).u8(entries.erase(key) > 0 ? 1 : 0));
        break;
      }
      case StoreOp::num_keys:
        reply(connection, status(StoreStatus::ok).i64(static_cast<std::int64_t>(entries.size())));
        break;
      case StoreOp::ages: {
        const auto keys = request.strings();
        MessageWriter message = status(StoreStatus::ok);
        message.i64(static_cast<std::int64_t>(keys.size()));
        const Clock::time_point now = Clock::now();
        for (const auto& key : keys) {
          auto found = entries.find(key);
          message.i64(found == entries.end()
                          ? -1
                          : std::chrono::duration_cast<std::chrono::milliseconds>(now - found->second.written).count());
        }
        reply(connection, message);
        break;
      }
      default:
        throw ProtocolError("unknown store op");
    }
  }

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> absent;
    for (const auto& key : keys)
      if (!entries.count(key)) absent.push_back(key);
    return absent;
  }

  void write(std::string key, std::string value) {
    entries[std::move(key)] = Entry{std::move(value), Clock::now()};
    answer_ready_waiters();
  }

  void answer(Connection& connection, const Waiter& waiter) {
    if (waiter.op == StoreOp::get)
      reply(connection, status(StoreStatus::ok).bytes(entries.at(waiter.keys.front()).value));
    else
      reply(connection, status(StoreStatus::ok));
  }

  void park_or_answer(int fd, Connection& connection, StoreOp op, std::vector<std::string> keys,
                      std::int64_t timeout_ms) {
    Waiter waiter{fd, op, std::move(keys), Clock::now() + std::chrono::milliseconds(std::max<std::int64_t>(timeout_ms, 0))};
    auto absent = missing(waiter.keys);
    if (absent.empty()) {
      answer(connection, waiter);
    } else if (timeout_ms <= 0) {
      reply(connection, status(StoreStatus::timeout).strings(absent));
    } else {
      connection.waiting = true;
      waiters.push_back(std::move(waiter));
    }
  }

  void answer_ready_waiters() {
    for (auto it = waiters.begin(); it != waiters.end();) {
      if (!missing(it->keys).empty()) {
        ++it;
        continue;
      }
      Connection& connection = connections.at(it->fd);
      answer(connection, *it);
      connection.waiting = false;
      flush(connection);
      it = waiters.erase(it);
    }
  }

  void expire_waiters() {
    const Clock::time_point now = Clock::now();
    std::vector<int> resumed;
    for (auto it = waiters.begin(); it != waiters.end();) {
      if (it->deadline > now) {
        ++it;
        continue;
      }
      Connection& connection = connections.at(it->fd);
      reply(connection, status(StoreStatus::timeout).strings(missing(it->keys)));
      connection.waiting = false;
      flush(connection);
      resumed.push_back(it->fd);
      it = waiters.erase(it);
    }
    // A client may have pipelined more requests behind the one that waited.
    for (int fd : resumed) process_input(fd);
  }
};

StoreServer::StoreServer(const std::string& host, int port, std::string token) : impl_(std::make_unique<Impl>()) {
  impl_->host = host;
  impl_->token = std::move(token);
  impl_->listener = listen_on(host, port);
  impl_->port = bound_port(impl_->listener);
  impl_->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl_->wake_fd < 0) throw DistError("the rendezvous store cannot create its wake-up event");
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

StoreServer::~StoreServer() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = ::write(impl_->wake_fd, &one, sizeof one);
  if (impl_->thread.joinable()) impl_->thread.join();
}

const std::string& StoreServer::host() const { return impl_->host; }

int StoreServer::port() const { return impl_->port; }

}  // namespace meshrun::dist_detail
