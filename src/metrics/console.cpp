// The console (meshrun/metrics/console.hpp).
#include "meshrun/metrics/console.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace meshrun {
namespace {

constexpr std::string_view kErase = "\r\033[K";

// spdlog's lines in terminal mode, written through the shared TerminalLine
// so that they never land in the middle of the progress line.
class TerminalSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& message) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(message, formatted);
    std::string_view text(formatted.data(), formatted.size());
    if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    stderr_terminal().line(text);
  }
  void flush_() override { std::cerr.flush(); }
};

ConsoleMode configured = ConsoleMode::plain;

int stderr_columns() {
  winsize size{};
  return ::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 ? size.ws_col : 0;
}

// `text` cut to `columns` - 1 characters (UTF-8 code points, which is what
// a terminal shows for the text meshrun writes).
std::string fit(std::string_view text, int columns) {
  if (columns <= 1) return std::string(text);
  size_t shown = 0, at = 0;
  for (; at < text.size(); ++at) {
    if ((static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) continue;  // a continuation byte
    if (shown == static_cast<size_t>(columns - 1)) break;
    ++shown;
  }
  return std::string(text.substr(0, at));
}

}  // namespace

void TerminalLine::progress(std::string_view text) {
  std::lock_guard lock(mutex_);
  drawn_ = columns_ ? fit(text, columns_()) : std::string(text);
  out_ << kErase << drawn_ << std::flush;
}

void TerminalLine::line(std::string_view text) {
  std::lock_guard lock(mutex_);
  if (!drawn_.empty()) out_ << kErase;
  out_ << text << '\n';
  if (!drawn_.empty()) out_ << drawn_;
  out_ << std::flush;
}

void TerminalLine::finish() {
  std::lock_guard lock(mutex_);
  if (drawn_.empty()) return;
  out_ << '\n' << std::flush;
  drawn_.clear();
}

TerminalLine& stderr_terminal() {
  static TerminalLine terminal(std::cerr, &stderr_columns);
  return terminal;
}

std::optional<std::string_view> relayed_progress(std::string_view line) {
  if (line.substr(0, kProgressMarker.size()) != kProgressMarker) return std::nullopt;
  return line.substr(kProgressMarker.size());
}

ConsoleMode console_mode() {
  const char* forced = std::getenv(kConsoleVariable);
  const std::string_view value = forced ? forced : "";
  if (value == "relay") return ConsoleMode::relay;
  if (value == "plain") return ConsoleMode::plain;
  if (value == "terminal") return ConsoleMode::terminal;
  return ::isatty(STDERR_FILENO) ? ConsoleMode::terminal : ConsoleMode::plain;
}

void configure_console(ConsoleMode mode) {
  configured = mode;
  switch (mode) {
    case ConsoleMode::terminal: {
      auto logger = std::make_shared<spdlog::logger>("meshrun", std::make_shared<TerminalSink>());
      logger->set_level(spdlog::get_level());
      spdlog::set_default_logger(logger);
      spdlog::set_pattern("[meshrun] %l: %v");
      break;
    }
    case ConsoleMode::relay:
      spdlog::set_pattern("[meshrun] %l: %v");
      break;
    case ConsoleMode::plain:
      spdlog::set_pattern("%Y-%m-%d %H:%M:%S [meshrun] %l: %v");
      break;
  }
}

ConsoleMode configured_console_mode() { return configured; }

void show_progress(std::string_view text) {
  switch (configured) {
    case ConsoleMode::terminal:
      stderr_terminal().progress(text);
      break;
    case ConsoleMode::relay: {
      // One write per line, so that it reaches the launcher whole.
      std::string line = std::string(kProgressMarker) + std::string(text) + "\n";
      std::fwrite(line.data(), 1, line.size(), stderr);
      std::fflush(stderr);
      break;
    }
    case ConsoleMode::plain:
      spdlog::info("{}", text);
      break;
  }
}

void finish_console() {
  if (configured == ConsoleMode::terminal) stderr_terminal().finish();
}

}  // namespace meshrun
