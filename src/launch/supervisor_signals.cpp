// The self-pipe that turns SIGINT/SIGTERM into something poll() sees. The
// handler is process-wide, hence one relay at a time.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "meshrun/launch/launcher.hpp"
#include "supervisor.hpp"

namespace meshrun::launch_detail {
namespace {

std::atomic<bool> relay_active{false};
// Read by the handler: a lock-free atomic is async-signal-safe.
std::atomic<int> relay_write_fd{-1};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void relay_signal(int signal) {
  const int saved_errno = errno;
  const int fd = relay_write_fd.load();
  if (fd >= 0) {
    const auto byte = static_cast<unsigned char>(signal);
    // Non-blocking: when the pipe is full, the signal is already pending there.
    (void)!::write(fd, &byte, 1);
  }
  errno = saved_errno;
}

}  // namespace

struct SignalRelay::SavedActions {
  struct sigaction interrupt {};
  struct sigaction terminate {};
  struct sigaction child {};
  bool child_changed = false;
};

SignalRelay::SignalRelay(bool catch_signals) : catch_signals_(catch_signals) {
  if (relay_active.exchange(true))
    throw std::logic_error("another local launch is already supervising workers in this process");
  saved_ = std::make_unique<SavedActions>();

  struct sigaction current_child {};
  ::sigaction(SIGCHLD, nullptr, &current_child);
  if (current_child.sa_handler == SIG_IGN) {
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    ::sigemptyset(&default_action.sa_mask);
    ::sigaction(SIGCHLD, &default_action, &saved_->child);
    saved_->child_changed = true;
  }
  if (!catch_signals_) return;

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int error = errno;
    if (saved_->child_changed) ::sigaction(SIGCHLD, &saved_->child, nullptr);
    relay_active = false;
    throw LaunchError(std::string("cannot create the signal pipe: ") + std::strerror(error));
  }
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  relay_write_fd = write_fd_;

  struct sigaction relay {};
  relay.sa_handler = relay_signal;
  ::sigemptyset(&relay.sa_mask);
  relay.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &relay, &saved_->interrupt);
  ::sigaction(SIGTERM, &relay, &saved_->terminate);
}

SignalRelay::~SignalRelay() {
  if (catch_signals_) {
    ::sigaction(SIGINT, &saved_->interrupt, nullptr);
    ::sigaction(SIGTERM, &saved_->terminate, nullptr);
    relay_write_fd = -1;
    ::close(read_fd_);
    ::close(write_fd_);
  }
  if (saved_->child_changed) ::sigaction(SIGCHLD, &saved_->child, nullptr);
  relay_active = false;
}

std::vector<int> SignalRelay::take_signals() {
  std::vector<int> signals;
  if (read_fd_ < 0) return signals;
  unsigned char buffer[64];
  while (true) {
    const ssize_t n = ::read(read_fd_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    signals.insert(signals.end(), buffer, buffer + n);
  }
  return signals;
}

}  // namespace meshrun::launch_detail
