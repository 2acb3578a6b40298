// Helpers of the tokenizer tests: a temporary directory, running the Python
// references (/usr/bin/python3) and reading what they write.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include "support/temp_dir.hpp"

namespace meshrun::test {


// doctest::Contains for a std::string built at run time.
inline doctest::Contains contains(const std::string& text) { return doctest::Contains(text.c_str()); }

inline std::string tokenizer_test_dir() { return std::string(MESHRUN_SOURCE_DIR) + "/tests/tokenizer"; }

inline std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `/usr/bin/python3 tests/tokenizer/SCRIPT ARGS...`; returns its exit status.
inline int run_python(const std::string& script, const std::string& args) {
  const std::string command = "/usr/bin/python3 " + quoted(tokenizer_test_dir() + "/" + script) + " " + args;
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline nlohmann::ordered_json read_json(const std::string& path) {
  return nlohmann::ordered_json::parse(read_text(path));
}

}  // namespace meshrun::test
