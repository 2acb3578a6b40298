// What the benchmark drivers share: the median of timed runs, and running a
// baseline process and reading "key=value" figures out of its output.
#pragma once

#include <algorithm>
#include <cstdio>
#include <memory>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshrun::bench {

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The command's standard output (run by the shell).
inline std::string run_and_capture(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("cannot run: " + command);
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe.get())) output.append(buffer, n);
  return output;
}

// The number after "key=" in a baseline's output.
inline double field(const std::string& text, const std::string& key) {
  std::smatch match;
  if (!std::regex_search(text, match, std::regex(key + "=([0-9.eE+-]+)")))
    throw std::runtime_error("no " + key + "= in the baseline's output: " + text);
  return std::stod(match[1]);
}

}  // namespace meshrun::bench
