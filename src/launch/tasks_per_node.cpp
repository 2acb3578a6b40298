// SLURM's compressed task counts, as in SLURM_TASKS_PER_NODE: one entry per
// node, in node order, where "N(xR)" stands for R nodes of N tasks each:
//   list  := entry ("," entry)*
//   entry := count | count "(x" repeat ")"
#include <charconv>
#include <string>
#include <vector>

#include "launch_internal.hpp"

namespace meshrun {
namespace launch_detail {
namespace {

// The whole of `text` as a decimal number of at least 1; 0 when it is not
// one, -1 when it is one too large for an int.
int whole_positive_number(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) return 0;
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) return -1;
  if (ec != std::errc() || end != text.data() + text.size()) return 0;
  return value;
}

}  // namespace

std::vector<int> expand_tasks_per_node(std::string_view tasks_per_node, std::string_view subject) {
  auto fail = [&](const std::string& reason) -> void {
    throw LaunchEnvError(std::string(subject) + " is malformed: " + reason +
                         " (expected counts like \"4(x2),3\")");
  };
  if (tasks_per_node.empty()) fail("it is empty");

  std::vector<int> counts;
  std::string_view rest = tasks_per_node;
  for (;;) {
    const size_t comma = rest.find(',');
    std::string_view entry = rest.substr(0, comma);
    const std::string quoted_entry = "'" + std::string(entry) + "'";
    if (entry.empty()) fail("an empty entry (a comma at an end or two in a row)");

    const size_t paren = entry.find('(');
    std::string_view count_text = entry.substr(0, paren);
    const int count = whole_positive_number(count_text);
    if (count_text.empty()) fail("entry " + quoted_entry + " has no task count before '('");
    if (count == 0) {
      fail("entry " + quoted_entry + " does not start with a task count of 1 or more");
    }
    if (count < 0) fail("entry " + quoted_entry + " has a task count too large for any node");

    int repeat = 1;
    if (paren != std::string_view::npos) {
      std::string_view suffix = entry.substr(paren);
      if (!suffix.starts_with("(x") || !suffix.ends_with(")") || suffix.size() < 3) {
        fail("entry " + quoted_entry + " has a repeat that is not of the form (xN)");
      }
      repeat = whole_positive_number(suffix.substr(2, suffix.size() - 3));
      if (repeat == 0) fail("entry " + quoted_entry + " needs a repeat count of 1 or more in (xN)");
      if (repeat < 0) fail("it has more than " + std::to_string(kMaxExpandedEntries) + " nodes");
    }
    if (counts.size() + static_cast<size_t>(repeat) > kMaxExpandedEntries) {
      fail("it has more than " + std::to_string(kMaxExpandedEntries) + " nodes");
    }
    counts.insert(counts.end(), static_cast<size_t>(repeat), count);

    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return counts;
}

}  // namespace launch_detail

std::vector<int> expand_tasks_per_node(std::string_view tasks_per_node) {
  return launch_detail::expand_tasks_per_node(
      tasks_per_node, "tasks-per-node list '" + std::string(tasks_per_node) + "'");
}

}  // namespace meshrun
