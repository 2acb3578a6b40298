#include "supervisor.hpp"

namespace meshrun::launch_detail {

void LineSplitter::append(std::string_view data, const Emit& emit) {
  // A newline right after a cut ends the line that was just passed on.
  if (cut_at_limit_ && !data.empty() && data.front() == '\n') data.remove_prefix(1);
  cut_at_limit_ = false;
  while (!data.empty()) {
    const auto newline = data.find('\n');
    const auto piece = data.substr(0, newline);
    // Whole lines that arrive in one read skip the copy into partial_.
    if (newline != std::string_view::npos && partial_.empty() && piece.size() <= kMaxLine) {
      emit(piece);
      data.remove_prefix(newline + 1);
      continue;
    }
    const auto room = kMaxLine - partial_.size();
    if (piece.size() >= room) {
      partial_.append(piece.substr(0, room));
      emit(partial_);
      partial_.clear();
      data.remove_prefix(room);
      if (!data.empty() && data.front() == '\n') data.remove_prefix(1);
      else cut_at_limit_ = data.empty();
      continue;
    }
    partial_.append(piece);
    if (newline == std::string_view::npos) return;
    emit(partial_);
    partial_.clear();
    data.remove_prefix(newline + 1);
  }
}

void LineSplitter::finish(const Emit& emit) {
  if (partial_.empty()) return;
  emit(partial_);
  partial_.clear();
}

}  // namespace meshrun::launch_detail
