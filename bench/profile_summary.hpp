// Self time per operator from LibTorch's legacy profiler (a Chrome trace
// written by torch::autograd::profiler::RecordProfile): what the benches'
// --profile prints, the 15 operators that took the most time.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace meshrun::bench {

// Self time per op name from a legacy-profiler trace (Chrome trace JSON).
inline void print_profile(const std::string& path, double seconds, const char* what) {
  std::ifstream file(path);
  nlohmann::json trace = nlohmann::json::parse(file, nullptr, false);
  if (trace.is_discarded()) {
    std::printf("  (profile %s could not be read)\n", path.c_str());
    return;
  }
  const auto& events = trace.is_array() ? trace : trace["traceEvents"];
  // Complete events nest by time on one thread: self = duration - children.
  struct Event { double start, end; std::string name; uint64_t tid; };
  std::vector<Event> list;
  for (const auto& e : events) {
    if (!e.contains("dur") || !e.contains("ts")) continue;
    double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    list.push_back({ts, ts + dur, e.value("name", "?"), e.value("tid", uint64_t{0})});
  }
  std::sort(list.begin(), list.end(), [](const Event& a, const Event& b) {
    return a.tid != b.tid ? a.tid < b.tid : a.start != b.start ? a.start < b.start : a.end > b.end;
  });
  std::map<std::string, double> self_us;
  std::vector<size_t> stack;
  std::vector<double> child_us(list.size(), 0);
  auto close = [&](size_t i) { self_us[list[i].name] += (list[i].end - list[i].start) - child_us[i]; };
  for (size_t i = 0; i < list.size(); ++i) {
    while (!stack.empty() && (list[stack.back()].tid != list[i].tid || list[stack.back()].end <= list[i].start)) {
      close(stack.back());
      stack.pop_back();
    }
    if (!stack.empty()) child_us[stack.back()] += list[i].end - list[i].start;
    stack.push_back(i);
  }
  while (!stack.empty()) {
    close(stack.back());
    stack.pop_back();
  }
  std::vector<std::pair<double, std::string>> ranked;
  double total = 0;
  for (const auto& [name, us] : self_us) {
    ranked.emplace_back(us, name);
    total += us;
  }
  std::sort(ranked.rbegin(), ranked.rend());
  std::printf("  profile of one %s (self time per op, %.0f ms profiled of a %.0f ms %s):\n", what, total / 1e3,
              seconds * 1e3, what);
  for (size_t i = 0; i < ranked.size() && i < 15; ++i)
    std::printf("    %6.1f%%  %8.2f ms  %s\n", 100 * ranked[i].first / total, ranked[i].first / 1e3,
                ranked[i].second.c_str());
}

}  // namespace meshrun::bench
