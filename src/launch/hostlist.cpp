// SLURM's compressed hostlist form, as in SLURM_NODELIST:
//   hostlist := host ("," host)*
//   host     := (text | "[" item ("," item)* "]")+
//   item     := number | number "-" number
// A range keeps the width of its lower bound, so "n[008-011]" gives n008 ...
// n011, and a name with several bracket groups is their cartesian product,
// the rightmost group varying fastest ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1
// r2n2), the order `scontrol show hostnames` prints.
#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

#include "launch_internal.hpp"

namespace meshrun {
namespace launch_detail {
namespace {

class HostlistParser {
 public:
  HostlistParser(std::string_view text, std::string_view subject)
      : text_(text), subject_(subject) {}

  std::vector<std::string> expand() {
    std::vector<std::string> hosts;
    if (text_.empty()) return hosts;
    size_t start = 0;
    for (;;) {
      const size_t end = end_of_host(start);
      expand_host(start, end, hosts);
      if (end == text_.size()) break;
      start = end + 1;  // past the separating comma
    }
    return hosts;
  }

 private:
  [[noreturn]] void fail(const std::string& reason) const {
    throw LaunchEnvError(std::string(subject_) + " is malformed: " + reason);
  }

  static std::string position(size_t index) { return "at character " + std::to_string(index + 1); }

  // The index of the comma that ends the host starting at `start` (commas
  // inside brackets separate items, not hosts), or the end of the text.
  size_t end_of_host(size_t start) const {
    size_t open_bracket = std::string_view::npos;
    for (size_t i = start; i < text_.size(); ++i) {
      const char c = text_[i];
      if (c == '[') {
        if (open_bracket != std::string_view::npos) {
          fail("'[' " + position(i) + " opens a group inside the group opened " +
               position(open_bracket));
        }
        open_bracket = i;
      } else if (c == ']') {
        if (open_bracket == std::string_view::npos) fail("']' " + position(i) + " closes nothing");
        open_bracket = std::string_view::npos;
      } else if (c == ',' && open_bracket == std::string_view::npos) {
        return i;
      }
    }
    if (open_bracket != std::string_view::npos) {
      fail("'[' " + position(open_bracket) + " is never closed");
    }
    return text_.size();
  }

  // Every name the host text_[start, end) stands for, appended to `hosts`.
  void expand_host(size_t start, size_t end, std::vector<std::string>& hosts) {
    if (start == end) {
      fail("empty host name " + position(start) + " (a comma at an end or two in a row)");
    }
    // Each segment is a literal (one choice) or a bracket group (its items).
    std::vector<std::vector<std::string>> segments;
    size_t i = start;
    while (i < end) {
      if (text_[i] == '[') {
        const size_t close = text_.find(']', i);  // end_of_host() saw it
        segments.push_back(expand_group(i + 1, close));
        i = close + 1;
      } else {
        const size_t next_bracket = std::min(text_.find('[', i), end);
        std::string_view literal = text_.substr(i, next_bracket - i);
        for (size_t k = 0; k < literal.size(); ++k) {
          if (literal[k] == ' ' || literal[k] == '\t' || literal[k] == '\n') {
            fail("whitespace " + position(i + k) + " (hosts are separated by commas)");
          }
        }
        segments.push_back({std::string(literal)});
        i = next_bracket;
      }
    }
    append_product(segments, hosts);
  }

  // The names of the group between '[' and ']' (text_[start, close)).
  std::vector<std::string> expand_group(size_t start, size_t close) {
    if (start == close) fail("empty brackets " + position(start - 1));
    std::vector<std::string> names;
    size_t item_start = start;
    for (;;) {
      const size_t item_end = std::min(text_.find(',', item_start), close);
      expand_item(item_start, item_end, names);
      if (item_end == close) break;
      item_start = item_end + 1;
    }
    return names;
  }

  void expand_item(size_t start, size_t end, std::vector<std::string>& names) {
    std::string_view item = text_.substr(start, end - start);
    if (item.empty()) fail("empty item in brackets " + position(start));
    const size_t dash = item.find('-');
    std::string_view low_text = item.substr(0, dash);
    std::string_view high_text = dash == std::string_view::npos ? low_text : item.substr(dash + 1);
    const long long low = parse_bound(low_text, item, start);
    const long long high = parse_bound(high_text, item, start);
    if (low > high) {
      fail("range '" + std::string(item) + "' " + position(start) + " runs backwards");
    }
    if (static_cast<unsigned long long>(high - low) + names.size() >= kMaxExpandedEntries) {
      fail("the brackets holding '" + std::string(item) + "' expand to more than " +
           std::to_string(kMaxExpandedEntries) + " hosts");
    }
    // Zero padding: the lower bound's digit count is the width of every name.
    const size_t width = low_text.size();
    charge(static_cast<size_t>(high - low + 1) * std::max(width, std::to_string(high).size()));
    for (long long n = low; n <= high; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      names.push_back(std::move(digits));
    }
  }

  long long parse_bound(std::string_view bound, std::string_view item, size_t item_start) const {
    long long value = 0;
    auto [end, ec] = std::from_chars(bound.data(), bound.data() + bound.size(), value);
    const bool all_digits =
        !bound.empty() && bound.find_first_not_of("0123456789") == std::string_view::npos;
    if (!all_digits || ec != std::errc() || end != bound.data() + bound.size()) {
      fail("'" + std::string(item) + "' " + position(item_start) +
           " is not a number or a range of numbers like 01-04");
    }
    return value;
  }

  void append_product(const std::vector<std::vector<std::string>>& segments,
                      std::vector<std::string>& hosts) {
    size_t count = 1;
    for (const auto& choices : segments) {
      count *= choices.size();
      if (count + hosts.size() > kMaxExpandedEntries) {
        fail("it expands to more than " + std::to_string(kMaxExpandedEntries) + " hosts");
      }
    }
    // Each choice of a segment appears in count / (its segment's size) names.
    size_t bytes = 0;
    for (const auto& choices : segments) {
      size_t segment_bytes = 0;
      for (const auto& choice : choices) segment_bytes += choice.size();
      bytes += segment_bytes * (count / choices.size());
    }
    charge(bytes);
    // An odometer over the segments' choices, the last one turning fastest.
    std::vector<size_t> choice(segments.size(), 0);
    for (size_t produced = 0; produced < count; ++produced) {
      std::string name;
      for (size_t s = 0; s < segments.size(); ++s) name += segments[s][choice[s]];
      hosts.push_back(std::move(name));
      for (size_t s = segments.size(); s-- > 0;) {
        if (++choice[s] < segments[s].size()) break;
        choice[s] = 0;
      }
    }
  }

  // Counts `bytes` more of host-name text against kMaxExpandedHostBytes,
  // before they are allocated.
  void charge(size_t bytes) {
    bytes_ += bytes;
    if (bytes_ > kMaxExpandedHostBytes) {
      fail("it expands to more than " + std::to_string(kMaxExpandedHostBytes >> 20) + " MiB of host names");
    }
  }

  std::string_view text_;
  std::string_view subject_;
  size_t bytes_ = 0;  // of every name expanded so far, bracket items included
};

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view hostlist, std::string_view subject) {
  return HostlistParser(hostlist, subject).expand();
}

}  // namespace launch_detail

std::vector<std::string> expand_hostlist(std::string_view hostlist) {
  return launch_detail::expand_hostlist(hostlist, "hostlist '" + std::string(hostlist) + "'");
}

}  // namespace meshrun
