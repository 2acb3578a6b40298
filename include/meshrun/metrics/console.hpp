// The console: how meshrun's log lines and its per-step progress line look
// on stderr. The mode is chosen once per process (console_mode()):
//   terminal: stderr is a terminal. Log lines as they are; the progress line
//     (step N/total, the headline metric, tokens/s, elapsed, ETA) is redrawn
//     in place, and a log line first erases it, then draws it again below.
//   relay: a worker of the local launcher whose launcher writes to a
//     terminal (MESHRUN_CONSOLE=relay, set by the launcher). Progress lines
//     go out as one line starting with kProgressMarker; the launcher draws
//     them in place on its terminal (TerminalLine).
//   plain: anything else (files, pipes, SLURM and MPI logs): every line,
//     progress included, starts with a local timestamp.
//
// Invariants: nothing but the progress line is ever overwritten; a process
// that ends with a progress line drawn ends it with a newline (finish());
// in relay mode a marked line never reaches a terminal unprocessed (only
// the launcher sets the mode, and only when it relays to a terminal).
#pragma once

#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

namespace meshrun {

enum class ConsoleMode { terminal, relay, plain };

// The marker of a relayed progress line.
inline constexpr std::string_view kProgressMarker = "\x1e" "meshrun-progress ";
// The variable the launcher sets for its workers.
inline constexpr const char* kConsoleVariable = "MESHRUN_CONSOLE";

// MESHRUN_CONSOLE=relay → relay; =plain / =terminal force those; else
// terminal when stderr is a terminal, plain otherwise.
ConsoleMode console_mode();

// Sets spdlog up for `mode` (the "[meshrun] level: " prefix, timestamps in
// plain mode, the progress-aware terminal sink). Once, at start.
void configure_console(ConsoleMode mode);

// The mode configure_console() set (plain before it is called).
ConsoleMode configured_console_mode();

// Shows the progress line (no newline in `text`), per the configured mode.
void show_progress(std::string_view text);

// Ends a progress line that is still drawn (terminal mode). Idempotent.
void finish_console();

// A terminal with one progress line at the bottom: progress() redraws it in
// place; line() erases it, writes a whole line, and draws it again below.
// Thread-safe. In terminal mode spdlog writes through stderr_terminal(); the
// launcher relays its workers' lines through it as well, so their progress
// and everyone's log lines share the screen.
class TerminalLine {
 public:
  // `columns`, when given, is the terminal's width now: a progress line
  // longer than that is cut (a wrapped line could not be redrawn in place).
  explicit TerminalLine(std::ostream& out, int (*columns)() = nullptr) : out_(out), columns_(columns) {}
  void progress(std::string_view text);
  void line(std::string_view text);
  // Ends a drawn progress line with a newline; it stays on screen.
  void finish();

 private:
  std::ostream& out_;
  int (*columns_)();
  std::string drawn_;  // the progress line on screen, empty when none
  std::mutex mutex_;
};

TerminalLine& stderr_terminal();

// For a relayed worker line: the progress text when it carries the marker.
std::optional<std::string_view> relayed_progress(std::string_view line);

}  // namespace meshrun
