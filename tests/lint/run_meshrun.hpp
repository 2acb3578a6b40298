// Runs the built meshrun executable from the repository root and captures
// its exit status, stdout and stderr. Used by the lint golden test and the
// command-line tests.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace meshrun::test {

struct CommandResult {
  int exit_code = -1;  // -1 when the process did not exit normally
  std::string out;
  std::string err;
};

inline std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

inline std::string meshrun_executable() { return std::string(MESHRUN_BUILD_DIR) + "/meshrun"; }

inline bool meshrun_built() { return std::filesystem::exists(meshrun_executable()); }

// `PROGRAM ARGS...` with the repository root as working directory.
// `environment` is prepended to the command line ("NAME=value ...").
inline CommandResult run_program(const std::string& program, const std::vector<std::string>& args,
                                 const std::string& environment = "") {
  static std::atomic<int> counter{0};
  const std::string err_path = (std::filesystem::temp_directory_path() /
                                ("meshrun-test-stderr-" + std::to_string(::getpid()) + "-" +
                                 std::to_string(counter++)))
                                   .string();
  std::string command = "cd " + shell_quote(MESHRUN_SOURCE_DIR) + " && " + environment + " " +
                        shell_quote(program);
  for (const auto& arg : args) command += " " + shell_quote(arg);
  command += " 2>" + shell_quote(err_path) + " </dev/null";

  CommandResult result;
  std::fflush(nullptr);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.out.append(buffer, n);
  const int status = ::pclose(pipe);
  if (status != -1 && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);

  std::ifstream err(err_path, std::ios::binary);
  std::stringstream text;
  text << err.rdbuf();
  result.err = text.str();
  std::error_code ec;
  std::filesystem::remove(err_path, ec);
  return result;
}

// `meshrun ARGS...` (the built front end) from the repository root.
inline CommandResult run_meshrun(const std::vector<std::string>& args, const std::string& environment = "") {
  return run_program(meshrun_executable(), args, environment);
}

// A line diff of `expected` and `actual` with two lines of context around
// each change ("-" expected only, "+" actual only), for failure messages.
inline std::string line_diff(const std::string& expected, const std::string& actual) {
  auto lines_of = [](const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  };
  const auto a = lines_of(expected), b = lines_of(actual);
  const size_t n = a.size(), m = b.size();
  // Longest common subsequence, from the ends.
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  struct Op {
    char kind;
    std::string line;
    size_t line_a, line_b;
  };
  std::vector<Op> ops;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      ops.push_back({' ', a[i], i + 1, j + 1});
      ++i, ++j;
    } else if (j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j])) {
      ops.push_back({'+', b[j], i + 1, j + 1});
      ++j;
    } else {
      ops.push_back({'-', a[i], i + 1, j + 1});
      ++i;
    }
  }
  // Show each change with `context` unchanged lines around it.
  const size_t context = 2;
  std::vector<bool> shown(ops.size(), false);
  for (size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].kind == ' ') continue;
    for (size_t q = k >= context ? k - context : 0; q < ops.size() && q <= k + context; ++q) shown[q] = true;
  }
  std::string out;
  bool in_hunk = false;
  for (size_t k = 0; k < ops.size(); ++k) {
    if (!shown[k]) {
      in_hunk = false;
      continue;
    }
    if (!in_hunk)
      out += "@@ expected line " + std::to_string(ops[k].line_a) + ", actual line " +
             std::to_string(ops[k].line_b) + " @@\n";
    in_hunk = true;
    out += std::string(1, ops[k].kind) + ops[k].line + "\n";
  }
  return out;
}

}  // namespace meshrun::test
