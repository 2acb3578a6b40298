#include "toml_flatten.hpp"

#include <optional>
#include <sstream>
#include <utility>

#include "meshrun/recipe/schema.hpp"

namespace meshrun {

SourceLocation location_of(const toml::source_region& region, const std::string& file) {
  return SourceLocation{file, static_cast<int>(region.begin.line), static_cast<int>(region.begin.column)};
}

namespace {

// Recipe keys nest four deep ("roles.actor.mesh.tp"); eight times that is
// still no recipe, and far below what toml++ and the flattening recurse on.
constexpr int kMaxKeyDepth = 32;

// toml++ parses a dotted key or a table header by recursion, one frame per
// part, and a recipe is flattened the same way: a key of thousands of parts
// ("a.a.a...") overflows the stack, and hundreds already cost quadratic
// time. The schema nests four deep, so a bounded scan before parsing rejects
// anything past kMaxKeyDepth at the key that goes too deep. Arrays and
// inline tables count as a level each (toml++ alone stops them at 256).
// The scan only follows strings, comments and brackets; what it cannot make
// sense of is left for toml++ to report.
class KeyDepthScan {
 public:
  explicit KeyDepthScan(std::string_view text) : text_(text) {}

  // The location of the first key too deep, if any.
  std::optional<std::pair<int, int>> first_too_deep() {
    bool expect_key = true;  // at a line start outside brackets, or after "{" / "," in an inline table
    int header_depth = 0;    // parts of the last [table] header
    while (at_ < text_.size()) {
      const char c = text_[at_];
      if (c == '\n') {
        advance();
        if (open_.empty()) expect_key = true;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        advance();
      } else if (c == '#') {
        while (at_ < text_.size() && text_[at_] != '\n') advance();
      } else if (expect_key && c == '[' && open_.empty()) {
        advance();
        if (at_ < text_.size() && text_[at_] == '[') advance();
        skip_spaces();
        const auto where = position();
        header_depth = key_parts();
        if (header_depth > kMaxKeyDepth) return where;
        skip_spaces();
        while (at_ < text_.size() && text_[at_] == ']') advance();
        expect_key = false;
      } else if (expect_key && c != '}' && c != ',') {
        const auto where = position();
        const int parts = key_parts();
        if (parts == 0) {  // not a key: toml++ will say what it is
          advance();
        } else if (depth(header_depth) + parts > kMaxKeyDepth) {
          return where;
        }
        open_key_parts_ = parts;
        expect_key = false;
      } else if (c == '"' || c == '\'') {
        skip_string();
      } else if (c == '[' || c == '{') {
        open_.push_back({c, open_key_parts_});
        if (depth(header_depth) > kMaxKeyDepth) return position();
        advance();
        open_key_parts_ = 0;
        expect_key = c == '{';
      } else if (c == ']' || c == '}') {
        if (!open_.empty()) open_.pop_back();
        advance();
      } else if (c == ',') {
        advance();
        expect_key = !open_.empty() && open_.back().bracket == '{';
      } else {
        advance();
      }
    }
    return std::nullopt;
  }

 private:
  struct Open {
    char bracket;
    int key_parts;  // of the key whose value this bracket opens
  };

  int depth(int header_depth) const {
    int total = header_depth;
    for (const Open& open : open_) total += open.key_parts + 1;
    return total;
  }

  // Reads `part(.part)*` and returns how many parts; 0 if no key is here.
  int key_parts() {
    int parts = 0;
    while (at_ < text_.size()) {
      skip_spaces();
      if (at_ >= text_.size()) break;
      const char c = text_[at_];
      if (c == '"' || c == '\'') {
        skip_string();
      } else if (is_bare_key_char(c)) {
        while (at_ < text_.size() && is_bare_key_char(text_[at_])) advance();
      } else {
        break;
      }
      ++parts;
      skip_spaces();
      if (at_ >= text_.size() || text_[at_] != '.') break;
      advance();
    }
    return parts;
  }

  static bool is_bare_key_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }

  // A basic or literal string, single- or multi-line; stops at the end of
  // a single-line one's line if it is not closed.
  void skip_string() {
    const char quote = text_[at_];
    const bool multiline = text_.substr(at_, 3) == std::string(3, quote);
    for (int i = 0; i < (multiline ? 3 : 1); ++i) advance();
    while (at_ < text_.size()) {
      const char c = text_[at_];
      if (!multiline && c == '\n') return;
      if (quote == '"' && c == '\\') {
        advance();
        if (at_ < text_.size()) advance();
        continue;
      }
      if (c == quote && (!multiline || text_.substr(at_, 3) == std::string(3, quote))) {
        for (int i = 0; i < (multiline ? 3 : 1); ++i) advance();
        // """a"""" closes with the last three quotes: take the extra ones.
        while (multiline && at_ < text_.size() && text_[at_] == quote) advance();
        return;
      }
      advance();
    }
  }

  void skip_spaces() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t')) advance();
  }

  // toml++ counts columns in code points: UTF-8 continuation bytes add none.
  void advance() {
    const char c = text_[at_++];
    if (c == '\n') {
      ++line_;
      column_ = 1;
    } else if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) {
      ++column_;
    }
  }

  std::pair<int, int> position() const { return {line_, column_}; }

  std::string_view text_;
  size_t at_ = 0;
  int line_ = 1;
  int column_ = 1;
  int open_key_parts_ = 0;  // parts of the key just read, for the bracket its value opens
  std::vector<Open> open_;
};


void flatten_table(const toml::table& table, const std::string& prefix, FlatDocument& out,
                   const std::string& base_dir) {
  for (auto&& [key, node] : table) {
    std::string path = prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
    SourceLocation key_location = location_of(key.source(), out.file);
    const KeySpec* spec = node.is_table() ? recipe_schema().find_key(path) : nullptr;
    if (const toml::table* sub = node.as_table(); sub && !(spec && spec->type == ValueType::table)) {
      // Implicit parent tables ("[roles.actor]" creates "roles") have no
      // source of their own; use the first key's position.
      SourceLocation where = key.source().begin.line ? key_location : location_of(sub->source(), out.file);
      out.tables.push_back({path, where});
      flatten_table(*sub, path, out, base_dir);
    } else {
      out.entries.push_back({path, &node, key_location, location_of(node.source(), out.file), base_dir});
    }
  }
}

}  // namespace

bool flatten_toml(std::string_view text, const std::string& file, const std::string& base_dir,
                  FlatDocument& out, Diagnostics& diagnostics) {
  out.file = file;
  if (auto too_deep = KeyDepthScan(text).first_too_deep()) {
    diagnostics.error(SourceLocation{file, too_deep->first, too_deep->second}, "schema.syntax",
                      "key nests more than " + std::to_string(kMaxKeyDepth) +
                          " levels deep (dotted parts, table header parts and brackets together)",
                      "recipe keys nest at most four deep, e.g. roles.actor.mesh.tp");
    return false;
  }
  try {
    out.root = std::make_shared<toml::table>(toml::parse(text, file));
  } catch (const toml::parse_error& error) {
    diagnostics.error(location_of(error.source(), file), "schema.syntax",
                      "invalid TOML: " + std::string(error.description()));
    return false;
  }
  flatten_table(*out.root, "", out, base_dir);
  return true;
}

std::string describe_node(const toml::node& node) {
  std::ostringstream out;
  switch (node.type()) {
    case toml::node_type::string: out << "string \"" << node.as_string()->get() << "\""; break;
    case toml::node_type::integer: out << "integer " << node.as_integer()->get(); break;
    case toml::node_type::floating_point: out << "float " << node.as_floating_point()->get(); break;
    case toml::node_type::boolean: out << (node.as_boolean()->get() ? "true" : "false"); break;
    case toml::node_type::array: out << "array"; break;
    case toml::node_type::table: out << "table"; break;
    case toml::node_type::date: out << "date"; break;
    case toml::node_type::time: out << "time"; break;
    case toml::node_type::date_time: out << "date-time"; break;
    default: out << "value"; break;
  }
  return out.str();
}

}  // namespace meshrun
