// Line-by-line JSONL reading with located problems.
#include "jsonl_reader.hpp"

#include <filesystem>
#include <fstream>

#include "meshrun/bounded_json.hpp"
#include "meshrun/model/hub_cache.hpp"

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

// One line into `line` (without its newline), at most kMaxJsonlLineBytes;
// a longer line is consumed to its end and reported by returning false.
// `consumed` gets the bytes read, newline included.
bool read_bounded_line(std::istream& in, std::string& line, long long& consumed) {
  line.clear();
  consumed = 0;
  bool too_long = false;
  char buffer[1 << 16];
  while (in) {
    in.getline(buffer, sizeof buffer);
    const std::streamsize got = in.gcount();
    consumed += got;
    const bool whole = !in.fail() || in.eof();  // newline found (counted in gcount) or end of file
    const std::size_t length = static_cast<std::size_t>(got) - (in.eof() || in.fail() ? 0 : 1);
    if (!too_long) {
      if (static_cast<long long>(line.size() + length) > kMaxJsonlLineBytes) {
        too_long = true;
        line.clear();
      } else {
        line.append(buffer, length);
      }
    }
    if (whole) break;
    in.clear();  // the buffer filled before the newline: read on
  }
  return !too_long;
}

}  // namespace

std::string json_type_name(const nlohmann::json& value) {
  if (value.is_number()) return "number";
  if (value.is_boolean()) return "boolean";
  return value.type_name();  // "null", "string", "array", "object"
}

long long read_jsonl(const std::string& path, ProblemList& problems,
                     const std::function<void(long long line, const nlohmann::json& object)>& on_object,
                     DataReadLimit limit) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw DataError({DataProblem{path, 0, "", "is a directory, not a JSONL file"}}, 1);
  }
  // A FIFO would block the open for ever; a device never ends.
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    throw DataError({DataProblem{path, 0, "", "is not a regular file (a pipe, socket or device)"}}, 1);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const std::string why = std::filesystem::exists(path, ec) ? "cannot be opened for reading" : "does not exist";
    throw DataError({DataProblem{path, 0, "", "data file " + why}}, 1);
  }
  long long line_number = 0;
  long long non_blank = 0;
  long long offset = 0;
  std::string line;
  if (limit.truncated) *limit.truncated = false;
  while (in.peek() != std::char_traits<char>::eof()) {
    const bool bytes_done = limit.max_bytes > 0 && offset >= limit.max_bytes;
    if (bytes_done || (limit.max_lines > 0 && non_blank >= limit.max_lines)) {
      if (limit.truncated) *limit.truncated = true;
      break;
    }
    long long consumed = 0;
    const bool fits = read_bounded_line(in, line, consumed);
    offset += consumed;
    ++line_number;
    if (!fits) {
      ++non_blank;
      problems.add(line_number, "", "longer than " + std::to_string(kMaxJsonlLineBytes >> 20) + " MiB");
      continue;
    }
    if (line_number == 1 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // UTF-8 byte order mark
    if (is_blank(line)) continue;
    ++non_blank;
    if (json_shape(line, kMaxJsonDepth, kMaxJsonlLineValues).allocated_values > kMaxJsonlLineValues) {
      problems.add(line_number, "",
                   "more than " + std::to_string(kMaxJsonlLineValues) +
                       " arrays, objects and strings in one line (each is a separate allocation once parsed); "
                       "split the record");
      continue;
    }
    nlohmann::json value;
    try {
      value = parse_bounded_json(line, true, kMaxJsonDepth, kMaxJsonlLineValues);
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

DataConfig with_resolved_path(const DataConfig& config) {
  const SourceResolution resolved = resolve_data_file(config.path);
  if (!resolved.error.empty()) throw DataError({DataProblem{config.path, 0, "", resolved.error}}, 1);
  DataConfig out = config;
  out.path = resolved.path;
  return out;
}

bool read_chat_messages(const nlohmann::json& list, const std::string& key, long long line, ProblemList& problems,
                        std::vector<ChatMessage>& messages) {
  if (!list.is_array() || list.empty()) {
    problems.add(line, key, "must be a non-empty list of {\"role\", \"content\"} objects, got " +
                                (list.is_array() ? std::string("an empty list") : json_type_name(list)));
    return false;
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string item = key + "[" + std::to_string(i) + "]";
    const nlohmann::json& message = list[i];
    const bool ok = message.is_object() && message.contains("role") && message["role"].is_string() &&
                    message.contains("content") && message["content"].is_string();
    if (!ok) {
      problems.add(line, item, "must be an object with string \"role\" and \"content\"");
      return false;
    }
    messages.push_back(ChatMessage{message["role"].get<std::string>(), message["content"].get<std::string>()});
  }
  return true;
}

}  // namespace meshrun::data
