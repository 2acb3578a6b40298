// Tests of src/metrics/console.cpp: the progress line drawn in place and the
// lines around it, the relay marker, the mode chosen from the environment,
// and a launcher's rank output relayed through a terminal.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "meshrun/metrics/console.hpp"
#include "src/launch/local_launcher_internal.hpp"

namespace meshrun {
namespace {

TEST_CASE("TerminalLine redraws the progress line in place and keeps log lines above it") {
  std::ostringstream out;
  TerminalLine terminal(out);
  terminal.line("first");  // no progress yet: a plain line
  CHECK(out.str() == "first\n");
  terminal.progress("step 1/3");
  terminal.progress("step 2/3");
  CHECK(out.str() == "first\n\r\033[Kstep 1/3\r\033[Kstep 2/3");
  out.str("");
  terminal.line("a log line");  // erases the progress, writes, draws it again
  CHECK(out.str() == "\r\033[Ka log line\nstep 2/3");
  out.str("");
  terminal.finish();
  terminal.finish();  // idempotent
  CHECK(out.str() == "\n");
  out.str("");
  terminal.line("after");
  CHECK(out.str() == "after\n");
}

int twelve_columns() { return 12; }

TEST_CASE("a progress line wider than the terminal is cut to fit, by characters") {
  std::ostringstream out;
  TerminalLine terminal(out, &twelve_columns);
  terminal.progress("step 1/2 ± 0.5 loss 1.25");
  CHECK(out.str() == "\r\033[Kstep 1/2 ± ");  // 11 characters, ± counted once
  out.str("");
  terminal.line("log lines are never cut, however long");
  CHECK(out.str() == "\r\033[Klog lines are never cut, however long\nstep 1/2 ± ");
}

TEST_CASE("relayed progress lines carry the marker") {
  CHECK(relayed_progress(std::string(kProgressMarker) + "sft step 1/2") == std::string_view("sft step 1/2"));
  CHECK_FALSE(relayed_progress("[meshrun] info: sft step 1/2"));
  CHECK_FALSE(relayed_progress(""));
}

TEST_CASE("the console mode follows MESHRUN_CONSOLE, else whether stderr is a terminal") {
  const char* before = std::getenv(kConsoleVariable);
  const std::string saved = before ? before : "";
  ::setenv(kConsoleVariable, "relay", 1);
  CHECK(console_mode() == ConsoleMode::relay);
  ::setenv(kConsoleVariable, "plain", 1);
  CHECK(console_mode() == ConsoleMode::plain);
  ::setenv(kConsoleVariable, "terminal", 1);
  CHECK(console_mode() == ConsoleMode::terminal);
  ::unsetenv(kConsoleVariable);
  CHECK(console_mode() == (::isatty(2) ? ConsoleMode::terminal : ConsoleMode::plain));
  if (before) ::setenv(kConsoleVariable, saved.c_str(), 1);
}

TEST_CASE("a rank's relayed progress is drawn in place by the launcher; its other lines go above") {
  std::ostringstream out, err, screen;
  TerminalLine terminal(screen);
  launch_detail::RankOutput rank(0, true, out, err, &terminal);
  rank.append(launch_detail::WorkerStream::err, "[meshrun] info: starting\n");
  rank.append(launch_detail::WorkerStream::err, std::string(kProgressMarker) + "sft step 1/2 loss 1.0\n");
  rank.append(launch_detail::WorkerStream::err, "[meshrun] warning: slow\n");
  rank.append(launch_detail::WorkerStream::err, std::string(kProgressMarker) + "sft step 2/2 loss 0.5\n");
  terminal.finish();
  CHECK(screen.str() ==
        "[rank 0] [meshrun] info: starting\n"
        "\r\033[K[rank 0] sft step 1/2 loss 1.0"
        "\r\033[K[rank 0] [meshrun] warning: slow\n[rank 0] sft step 1/2 loss 1.0"
        "\r\033[K[rank 0] sft step 2/2 loss 0.5\n");
  CHECK(err.str().empty());
  // Without a terminal, lines pass as they are.
  launch_detail::RankOutput plain(1, true, out, err);
  plain.append(launch_detail::WorkerStream::err, "2026-01-01 00:00:00 [meshrun] info: x\n");
  CHECK(err.str() == "[rank 1] 2026-01-01 00:00:00 [meshrun] info: x\n");
}

}  // namespace
}  // namespace meshrun
