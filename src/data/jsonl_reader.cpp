// JSONL (or one JSON array of records) reading with located problems.
#include "meshrun/data/jsonl_reader.hpp"

#include <filesystem>
#include <fstream>
#include <string_view>

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

// One record's text (a line, or an element of a JSON array) checked for
// its size and parsed; on_object gets it when it is an object.
void take_record(const std::string& text, long long line, ProblemList& problems,
                 const std::function<void(long long line, const nlohmann::json& object)>& on_object) {
  if (json_shape(text, kMaxJsonDepth, kMaxJsonlLineValues).allocated_values > kMaxJsonlLineValues) {
    problems.add(line, "",
                 "more than " + std::to_string(kMaxJsonlLineValues) +
                     " arrays, objects and strings in one record (each is a separate allocation once parsed); "
                     "split the record");
    return;
  }
  nlohmann::json value;
  try {
    value = parse_bounded_json(text, true, kMaxJsonDepth, kMaxJsonlLineValues);
  } catch (const nlohmann::json::exception& error) {
    problems.add(line, "", "not JSON: " + without_exception_tag(error.what()));
    return;
  }
  if (!value.is_object()) {
    problems.add(line, "", "expected a JSON object, got " + json_type_name(value));
    return;
  }
  on_object(line, value);
}

// Formats a data file is sometimes given in that meshrun does not read,
// told apart by their first bytes: the problem to report, or "".
std::string foreign_format(std::istream& in) {
  char head[8] = {};
  in.read(head, sizeof head);
  const std::string start(head, static_cast<std::size_t>(in.gcount()));
  in.clear();
  in.seekg(0);
  const std::string convert =
      std::string("; meshrun reads JSON Lines or one JSON array of records: convert it, e.g. ") + kParquetToJsonlCommand;
  if (start.starts_with("PAR1")) return "is a Parquet file" + convert;
  if (start.starts_with("ARROW1")) return "is an Arrow IPC file (pd.read_feather reads it)" + convert;
  if (start.starts_with("\x1f\x8b")) return "is gzip-compressed; decompress it first (gunzip -k)";
  if (start.starts_with("\x28\xb5\x2f\xfd")) return "is zstd-compressed; decompress it first (unzstd)";
  if (start.starts_with("PK\x03\x04")) return "is a zip archive; extract the JSONL file from it";
  // Windows tools write UTF-16 with a byte-order mark (FF FE, or FE FF).
  if (start.starts_with("\xff\xfe") || start.starts_with("\xfe\xff"))
    return "is UTF-16 text (its byte-order mark); meshrun reads UTF-8: convert it (iconv -f UTF-16 -t UTF-8)";
  return "";
}

// With `in` just past a file's first [: whether the file is JSON Lines
// whose first line is an array (a complete JSON value on that line, with
// more text after it) rather than one JSON array. Leaves `in` where it was.
bool json_lines_of_arrays(std::istream& in) {
  const std::streampos after_bracket = in.tellg();
  in.seekg(after_bracket - std::streamoff(1));
  std::string first;
  long long consumed = 0;
  const bool fits = read_bounded_line(in, first, consumed);
  bool more = false;
  for (char c = 0; fits && in.get(c);) {
    if (std::string_view(" \t\r\n\f\v").find(c) == std::string_view::npos) {
      more = true;
      break;
    }
  }
  const bool lines = more && nlohmann::json::accept(first);
  in.clear();
  in.seekg(after_bracket);
  return lines;
}

// The records of a file holding one JSON array (`[{...}, {...}]`, as
// Alpaca's data and `datasets`' to_json(lines=False) write it), each
// located at the line its element starts on. Hand-written because each
// element must be split out, bounded and located before it is parsed, and
// nlohmann's SAX events carry no position: the scanner only tracks strings
// (and their escapes) and bracket depth to find the commas and the ] that
// end an element at the top level. `in` stands after the opening [;
// `line` is its line. Returns the number of elements.
long long read_json_array(std::istream& in, long long line, ProblemList& problems,
                          const std::function<void(long long line, const nlohmann::json& object)>& on_object,
                          DataReadLimit limit) {
  long long records = 0, offset = 0;
  std::string element;
  long long element_line = 0;
  bool in_element = false, too_long = false, in_string = false, escaped = false, closed = false;
  bool expect_element = true;  // after [ or a comma
  long long depth = 0;
  long long after_close_line = 0;
  const auto finish = [&]() -> bool {  // false: the read limit is reached
    ++records;
    if (too_long)
      problems.add(element_line, "", "record longer than " + std::to_string(kMaxJsonlLineBytes >> 20) + " MiB");
    else
      take_record(element, element_line, problems, on_object);
    element.clear();
    in_element = too_long = false;
    depth = 0;
    const bool bytes_done = limit.max_bytes > 0 && offset >= limit.max_bytes;
    if (bytes_done || (limit.max_lines > 0 && records >= limit.max_lines)) {
      if (limit.truncated) *limit.truncated = true;
      return false;
    }
    return true;
  };
  char buffer[1 << 16];
  while (in) {
    in.read(buffer, sizeof buffer);
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    for (std::streamsize i = 0; i < got; ++i) {
      const char c = buffer[i];
      ++offset;
      if (closed) {
        if (c == '\n') ++line;
        else if (std::string_view(" \t\r\f\v").find(c) == std::string_view::npos && after_close_line == 0)
          after_close_line = line;
        continue;
      }
      if (!in_element) {
        if (c == '\n') {
          ++line;
          continue;
        }
        if (std::string_view(" \t\r\f\v").find(c) != std::string_view::npos) continue;
        if (c == ']') {
          // [{...},]: JSON has no trailing comma (json.load refuses it).
          if (expect_element && records > 0) problems.add(line, "", "not JSON: a comma before the closing ]");
          closed = true;
          continue;
        }
        if (c == ',') {
          if (expect_element) problems.add(line, "", "not JSON: a comma without a record before it");
          expect_element = true;
          continue;
        }
        // Two records without a comma between them scan as one element,
        // which then fails to parse.
        in_element = true;
        expect_element = false;
        element_line = line;
      }
      if (!in_string && depth == 0 && (c == ',' || c == ']')) {
        if (!finish()) return records;
        if (c == ']') closed = true;
        else expect_element = true;
        continue;
      }
      if (c == '\n') ++line;
      if (in_string) {
        if (escaped) escaped = false;
        else if (c == '\\') escaped = true;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        --depth;
      }
      if (!too_long) {
        if (static_cast<long long>(element.size()) >= kMaxJsonlLineBytes) {
          too_long = true;
          element.clear();
          element.shrink_to_fit();
        } else {
          element.push_back(c);
        }
      }
    }
  }
  if (in_element) {
    finish();
    problems.add(line, "", "the JSON array is not closed (no ] at the end of the file)");
  } else if (!closed) {
    problems.add(line, "", "the JSON array is not closed (no ] at the end of the file)");
  } else if (after_close_line != 0) {
    problems.add(after_close_line, "", "text after the JSON array's closing ]");
  }
  return records;
}

}  // namespace

const nlohmann::json* field(const nlohmann::json& object, const std::string& key) {
  if (!object.is_object()) return nullptr;
  if (const auto found = object.find(key); found != object.end()) return &*found;
  if (key.find('.') == std::string::npos) return nullptr;
  const nlohmann::json* at = &object;
  std::size_t begin = 0;
  while (true) {  // one step per dot of the key: bounded by its length
    const std::size_t dot = key.find('.', begin);
    const std::string part = key.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (!at->is_object()) return nullptr;
    const auto found = at->find(part);
    if (found == at->end()) return nullptr;
    at = &*found;
    if (dot == std::string::npos) return at;
    begin = dot + 1;
  }
}

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
  if (const std::string foreign = foreign_format(in); !foreign.empty())
    throw DataError({DataProblem{path, 0, "", foreign}}, 1);
  if (limit.truncated) *limit.truncated = false;
  // One JSON array of records when the first character (after a byte
  // order mark and blank space) is [; JSON Lines otherwise.
  {
    long long line = 1;
    char c = 0;
    if (in.peek() == 0xEF) {
      char bom[3] = {};
      in.read(bom, 3);
      if (std::string_view(bom, 3) != "\xEF\xBB\xBF") in.seekg(0);
    }
    while (in.get(c) && std::string_view(" \t\r\n\f\v").find(c) != std::string_view::npos)
      if (c == '\n') ++line;
    if (in && c == '[' && !json_lines_of_arrays(in)) {
      const long long records = read_json_array(in, line, problems, on_object, limit);
      if (in.bad()) throw DataError({DataProblem{path, line, "", "read error"}}, 1);
      return records;
    }
    in.clear();
    in.seekg(0);
  }
  long long line_number = 0;
  long long non_blank = 0;
  long long offset = 0;
  std::string line;
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
    take_record(line, line_number, problems, on_object);
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

std::shared_ptr<const nlohmann::ordered_json> extra_message_fields(const nlohmann::json& message) {
  if (!message.is_object() || message.size() <= 2) return nullptr;
  auto fields = std::make_shared<nlohmann::ordered_json>(nlohmann::ordered_json::object());
  for (auto it = message.begin(); it != message.end(); ++it)
    if (it.key() != "role" && it.key() != "content") (*fields)[it.key()] = nlohmann::ordered_json::parse(it.value().dump());
  if (fields->empty()) return nullptr;
  return fields;
}

bool refuse_record_tools(const nlohmann::json& record, long long line, ProblemList& problems) {
  const auto tools = record.is_object() ? record.find("tools") : record.end();
  if (tools == record.end() || tools->is_null()) return false;
  problems.add(line, "tools",
               "a record's tool definitions are not passed to the chat template (its messages are, with their "
               "tool_calls); describe the tools in the system message, or remove the key");
  return true;
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
    messages.push_back(ChatMessage{message["role"].get<std::string>(), message["content"].get<std::string>(),
                                   extra_message_fields(message)});
  }
  return true;
}

}  // namespace meshrun::data
