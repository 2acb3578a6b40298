// Values with the Python semantics chat templates rely on: truthiness,
// str() and repr(), equality and ordering, and json.dumps for tojson.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include <nlohmann/json.hpp>

#include "jinja.hpp"
#include "utf8.hpp"

namespace meshrun::jinja {

void check_string_size(std::size_t size) {
  if (size > kMaxRenderBytes)
    throw RenderError{"a string of more than " + std::to_string(kMaxRenderBytes >> 20) +
                      " MiB; a chat template's text is far smaller (runaway repetition?)"};
}

namespace {
thread_local CreationBudget* active_budget = nullptr;
}  // namespace

CreationBudget::CreationBudget() : previous_(active_budget) { active_budget = this; }
CreationBudget::~CreationBudget() { active_budget = previous_; }

void CreationBudget::charge(std::size_t bytes) {
  used_ += std::min(bytes, kMaxRenderCreatedBytes + 1);
  if (used_ > kMaxRenderCreatedBytes)
    throw RenderError{"the template created more than " + std::to_string(kMaxRenderCreatedBytes >> 20) +
                      " MiB of strings and lists (runaway copying?)"};
}

void charge_creation(std::size_t bytes) {
  if (active_budget) active_budget->charge(bytes);
}

std::size_t shallow_bytes(const List& items) {
  std::size_t bytes = items.size() * sizeof(Value);
  for (const Value& item : items) bytes += item.s.size();
  return bytes;
}

void check_list_size(std::size_t size) {
  if (size > kMaxRenderItems)
    throw RenderError{"a list of more than " + std::to_string(kMaxRenderItems) + " items (runaway repetition?)"};
}

Value* Dict::find(const std::string& key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

// A list of lists a million deep (built in a template loop) would be
// released by a million nested destructor calls; instead the last handle
// of a container hands it to a per-thread queue that the outermost release
// empties one container at a time.
Value::~Value() {
  if (!list && !dict) return;
  struct Released {
    std::vector<std::shared_ptr<List>> lists;
    std::vector<std::shared_ptr<Dict>> dicts;
    bool draining = false;
  };
  thread_local Released released;
  if (list && list.use_count() == 1) released.lists.push_back(std::move(list));
  if (dict && dict.use_count() == 1) released.dicts.push_back(std::move(dict));
  if (released.draining) return;
  released.draining = true;
  while (!released.lists.empty() || !released.dicts.empty()) {
    if (!released.lists.empty()) {
      const std::shared_ptr<List> last = std::move(released.lists.back());
      released.lists.pop_back();
    } else {
      const std::shared_ptr<Dict> last = std::move(released.dicts.back());
      released.dicts.pop_back();
    }
  }
  released.draining = false;
}

void check_value_depth(int depth) {
  if (depth > kMaxValueDepth)
    throw RenderError{"lists or dicts nested deeper than " + std::to_string(kMaxValueDepth) +
                      " levels (or containing themselves)"};
}

void Dict::set(const std::string& key, Value value) {
  if (Value* existing = find(key)) *existing = std::move(value);
  else items.emplace_back(key, std::move(value));
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null: return none();
    case nlohmann::json::value_t::boolean: return boolean(json.get<bool>());
    case nlohmann::json::value_t::number_integer: return integer(json.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      // Past INT64_MAX the nearest double, as close to Python's big int as 64 bits allow.
      const auto value = json.get<uint64_t>();
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return real(static_cast<double>(value));
      return integer(static_cast<int64_t>(value));
    }
    case nlohmann::json::value_t::number_float: return real(json.get<double>());
    case nlohmann::json::value_t::string: return string(json.get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      for (const auto& item : json) items.push_back(from_json(item));
      return make_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict dict;
      for (auto it = json.begin(); it != json.end(); ++it) dict.items.emplace_back(it.key(), from_json(it.value()));
      return make_dict(std::move(dict));
    }
    default: return undefined();
  }
}

std::u32string code_points(const std::string& s) { return tokenizer_detail::to_code_points(s); }
std::string utf8(const std::u32string& s) { return tokenizer_detail::from_code_points(s); }

bool truthy(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::Undefined:
    case K::None: return false;
    case K::Bool: return v.b;
    case K::Int: return v.i != 0;
    case K::Float: return v.f != 0;
    case K::String: return !v.s.empty();
    case K::List: return !v.list->empty();
    case K::Dict: return !v.dict->items.empty();
    case K::Function: return true;
  }
  return false;
}

namespace {

// Python's repr of a float: shortest round-trip digits, fixed notation for
// exponents in [-4, 16), otherwise d.ddde+XX.
std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string sci(buffer, result.ptr);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exponent) + 1) + "." + digits.substr(static_cast<size_t>(exponent) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  }
  return negative ? "-" + out : out;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : code_points(s)) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<char32_t>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(c));
      out += hex;
    } else {
      tokenizer_detail::append_utf8(out, c);
    }
  }
  return out + quote;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\u%04x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_dump(std::string& out, const Value& v, int indent, int depth) {
  using K = Value::Kind;
  check_value_depth(depth);
  auto newline = [&](int level) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  };
  const char* item_separator = indent < 0 ? ", " : ",";
  switch (v.kind) {
    case K::None: out += "null"; return;
    case K::Bool: out += v.b ? "true" : "false"; return;
    case K::Int: out += std::to_string(v.i); return;
    case K::Float:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : float_repr(v.f);
      return;
    case K::String: json_string(out, v.s); return;
    case K::List:
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += item_separator;
        newline(depth + 1);
        json_dump(out, (*v.list)[i], indent, depth + 1);
        check_string_size(out.size());
      }
      newline(depth);
      out += ']';
      return;
    case K::Dict:
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < v.dict->items.size(); ++i) {
        if (i) out += item_separator;
        newline(depth + 1);
        json_string(out, v.dict->items[i].first);
        out += ": ";
        json_dump(out, v.dict->items[i].second, indent, depth + 1);
        check_string_size(out.size());
      }
      newline(depth);
      out += '}';
      return;
    default: throw RenderError{"Object of type " + type_name(v) + " is not JSON serializable"};
  }
}

}  // namespace

std::string type_name(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::Undefined: return "Undefined";
    case K::None: return "NoneType";
    case K::Bool: return "bool";
    case K::Int: return "int";
    case K::Float: return "float";
    case K::String: return "str";
    case K::List: return "list";
    case K::Dict: return v.dict->is_namespace ? "Namespace" : "dict";
    case K::Function: return "function";
  }
  return "?";
}

std::string to_str(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::Undefined: return "";
    case K::String: return v.s;
    default: return to_repr(v);
  }
}

namespace {

std::string repr_at(const Value& v, int depth) {
  using K = Value::Kind;
  check_value_depth(depth);
  switch (v.kind) {
    case K::Undefined: return "Undefined";
    case K::None: return "None";
    case K::Bool: return v.b ? "True" : "False";
    case K::Int: return std::to_string(v.i);
    case K::Float: return float_repr(v.f);
    case K::String: return string_repr(v.s);
    case K::List: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        out += (i ? ", " : "") + repr_at((*v.list)[i], depth + 1);
        check_string_size(out.size());
      }
      if (v.tuple) return out + (v.list->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case K::Dict: {
      std::string out = v.dict->is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < v.dict->items.size(); ++i) {
        out += (i ? ", " : "") + string_repr(v.dict->items[i].first) + ": " + repr_at(v.dict->items[i].second, depth + 1);
        check_string_size(out.size());
      }
      return out + (v.dict->is_namespace ? "}>" : "}");
    }
    case K::Function: return "<function>";
  }
  return "";
}

bool equal_at(const Value& a, const Value& b, int depth) {
  using K = Value::Kind;
  check_value_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.kind != K::Float && b.kind != K::Float)
      return (a.kind == K::Bool ? a.b : a.i) == (b.kind == K::Bool ? b.b : b.i);
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.s == b.s;
    case K::List:
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!equal_at((*a.list)[i], (*b.list)[i], depth + 1)) return false;
      return true;
    case K::Dict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [key, value] : a.dict->items) {
        const Value* other = b.dict->find(key);
        if (!other || !equal_at(value, *other, depth + 1)) return false;
      }
      return true;
    case K::Function: return a.function == b.function;
    default: return false;
  }
}

bool less_at(const Value& a, const Value& b, int depth) {
  using K = Value::Kind;
  check_value_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.kind != K::Float && b.kind != K::Float)
      return (a.kind == K::Bool ? a.b : a.i) < (b.kind == K::Bool ? b.b : b.i);
    return a.as_double() < b.as_double();
  }
  if (a.kind == K::String && b.kind == K::String) return a.s < b.s;
  if (a.kind == K::List && b.kind == K::List) {
    for (size_t i = 0; i < a.list->size() && i < b.list->size(); ++i) {
      if (less_at((*a.list)[i], (*b.list)[i], depth + 1)) return true;
      if (less_at((*b.list)[i], (*a.list)[i], depth + 1)) return false;
    }
    return a.list->size() < b.list->size();
  }
  throw RenderError{"'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'"};
}

}  // namespace

std::string to_repr(const Value& v) { return repr_at(v, 0); }
bool equal(const Value& a, const Value& b) { return equal_at(a, b, 0); }
bool less(const Value& a, const Value& b) { return less_at(a, b, 0); }

std::string to_json(const Value& v, int indent) {
  std::string out;
  json_dump(out, v, indent, 0);
  return out;
}

}  // namespace meshrun::jinja
