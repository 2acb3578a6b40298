#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ostream>

#include "local_launcher_internal.hpp"
#include "meshrun/metrics/console.hpp"

namespace meshrun::launch_detail {

RankOutput::RankOutput(int rank, bool show_stdout, std::ostream& out, std::ostream& err, TerminalLine* terminal)
    : rank_(rank), show_stdout_(show_stdout), out_(out), err_(err), terminal_(terminal) {}

void RankOutput::append(WorkerStream stream, std::string_view data) {
  auto& lines = stream == WorkerStream::out ? out_lines_ : err_lines_;
  lines.append(data, [&](std::string_view line) { emit(stream, line); });
}

void RankOutput::finish(WorkerStream stream) {
  auto& lines = stream == WorkerStream::out ? out_lines_ : err_lines_;
  lines.finish([&](std::string_view line) { emit(stream, line); });
}

void RankOutput::emit(WorkerStream stream, std::string_view line) {
  if (stream == WorkerStream::out && !show_stdout_) {
    hidden_tail_.emplace_back(line);
    if (hidden_tail_.size() > kHiddenTailLines) hidden_tail_.pop_front();
    return;
  }
  const std::string prefix = "[rank " + std::to_string(rank_) + "] ";
  if (stream == WorkerStream::err && terminal_) {
    if (const auto progress = relayed_progress(line)) terminal_->progress(prefix + std::string(*progress));
    else terminal_->line(prefix + std::string(line));
    return;
  }
  auto& target = stream == WorkerStream::out ? out_ : err_;
  target << prefix << line << '\n';
}

void RankOutput::show_hidden_tail() {
  if (hidden_tail_.empty()) return;
  const std::string heading =
      fmt::format("[launcher] the last {} line(s) rank {} wrote to stdout, hidden while it ran:", hidden_tail_.size(), rank_);
  if (terminal_) terminal_->line(heading);
  else err_ << heading << '\n';
  for (const auto& line : hidden_tail_) {
    if (terminal_) terminal_->line("[rank " + std::to_string(rank_) + "] " + line);
    else err_ << "[rank " << rank_ << "] " << line << '\n';
  }
  hidden_tail_.clear();
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

}  // namespace meshrun::launch_detail
