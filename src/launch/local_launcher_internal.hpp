// Routing of worker output for the local launcher (policy in
// meshrun/launch/launcher.hpp): every line gets a "[rank N] " prefix; a stream that
// is not shown is still read to its end (a full pipe would block the worker)
// and its last lines are kept for the failure report.
#pragma once

#include <deque>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "meshrun/metrics/console.hpp"
#include "supervisor.hpp"

namespace meshrun::launch_detail {

enum class WorkerStream { out, err };

class RankOutput {
 public:
  static constexpr std::size_t kHiddenTailLines = 20;

  // With a terminal, stderr lines go through it (progress lines drawn in place).
  RankOutput(int rank, bool show_stdout, std::ostream& out, std::ostream& err, TerminalLine* terminal = nullptr);

  void append(WorkerStream stream, std::string_view data);
  // The stream reached its end: its last line is shown even without a newline.
  void finish(WorkerStream stream);
  // Writes the kept lines of hidden stdout to `err`, under a heading that
  // says they were hidden. Nothing when there are none.
  void show_hidden_tail();

 private:
  void emit(WorkerStream stream, std::string_view line);

  int rank_;
  bool show_stdout_;
  std::ostream& out_;
  std::ostream& err_;
  TerminalLine* terminal_;
  LineSplitter out_lines_, err_lines_;
  std::deque<std::string> hidden_tail_;
};

// "rank 3" or "ranks 0, 2".
std::string rank_list(const std::vector<int>& ranks);

}  // namespace meshrun::launch_detail
