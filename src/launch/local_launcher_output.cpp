#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ostream>

#include "local_launcher_internal.hpp"

namespace meshrun::launch_detail {

RankOutput::RankOutput(int rank, bool show_stdout, std::ostream& out, std::ostream& err)
    : rank_(rank), show_stdout_(show_stdout), out_(out), err_(err) {}

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
  auto& target = stream == WorkerStream::out ? out_ : err_;
  target << "[rank " << rank_ << "] " << line << '\n';
}

void RankOutput::show_hidden_tail() {
  if (hidden_tail_.empty()) return;
  err_ << fmt::format("[launcher] the last {} line(s) rank {} wrote to stdout, hidden while it ran:\n",
                      hidden_tail_.size(), rank_);
  for (const auto& line : hidden_tail_) err_ << "[rank " << rank_ << "] " << line << '\n';
  hidden_tail_.clear();
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

}  // namespace meshrun::launch_detail
