// Line-by-line JSONL reading with located problems.
#include "jsonl_reader.hpp"

#include <filesystem>
#include <fstream>

namespace meshrun::data {

namespace {

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n\f\v") == std::string::npos;
}

// nlohmann's messages start with "[json.exception.parse_error.101] ".
std::string without_exception_tag(const std::string& message) {
  if (!message.empty() && message.front() == '[') {
    const auto close = message.find("] ");
    if (close != std::string::npos) return message.substr(close + 2);
  }
  return message;
}

}  // namespace

std::string json_type_name(const nlohmann::json& value) {
  if (value.is_number()) return "number";
  if (value.is_boolean()) return "boolean";
  return value.type_name();  // "null", "string", "array", "object"
}

long long read_jsonl(const std::string& path, ProblemList& problems,
                     const std::function<void(long long line, const nlohmann::json& object)>& on_object) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw DataError({DataProblem{path, 0, "", "is a directory, not a JSONL file"}}, 1);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const std::string why = std::filesystem::exists(path, ec) ? "cannot be opened for reading" : "does not exist";
    throw DataError({DataProblem{path, 0, "", "data file " + why}}, 1);
  }
  long long line_number = 0;
  long long non_blank = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++line_number;
    if (line_number == 1 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // UTF-8 byte order mark
    if (is_blank(line)) continue;
    ++non_blank;
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& error) {
      problems.add(line_number, "", "not JSON: " + without_exception_tag(error.what()));
      continue;
    }
    if (!value.is_object()) {
      problems.add(line_number, "", "expected a JSON object, got " + json_type_name(value));
      continue;
    }
    on_object(line_number, value);
  }
  if (in.bad()) throw DataError({DataProblem{path, line_number, "", "read error"}}, 1);
  return non_blank;
}

}  // namespace meshrun::data
