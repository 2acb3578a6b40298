// DataProblem / DataError formatting and the bounded ProblemList.
#include <utility>

#include "meshrun/data/jsonl_reader.hpp"
#include "meshrun/data/dataset.hpp"

namespace meshrun {

std::string DataProblem::str() const {
  std::string text = file;
  if (line > 0) text += ":" + std::to_string(line);
  text += ": ";
  if (!key.empty()) text += "key \"" + key + "\": ";
  return text + message;
}

namespace {

std::string describe(const std::vector<DataProblem>& problems, long long total) {
  std::string file = problems.empty() ? std::string("data") : problems.front().file;
  std::string text = std::to_string(total) + (total == 1 ? " problem" : " problems") + " in " + file + ":";
  for (const DataProblem& problem : problems) text += "\n  " + problem.str();
  const long long rest = total - static_cast<long long>(problems.size());
  if (rest > 0) text += "\n  ... and " + std::to_string(rest) + " more";
  return text;
}

}  // namespace

DataError::DataError(std::vector<DataProblem> problems, long long total)
    : KindError(describe(problems, total)), problems_(std::move(problems)), total_(total) {}

namespace data {

void ProblemList::add(long long line, std::string key, std::string message) {
  add(DataProblem{file_, line, std::move(key), std::move(message)});
}

void ProblemList::add(DataProblem problem) {
  ++total_;
  if (static_cast<long long>(kept_.size()) < limit_) kept_.push_back(std::move(problem));
}

void ProblemList::throw_if_any() const {
  if (total_ > 0) throw DataError(kept_, total_);
}

}  // namespace data
}  // namespace meshrun
