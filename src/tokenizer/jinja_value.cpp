// Values with the Python semantics chat templates rely on: truthiness,
// str() and repr(), equality and ordering, and json.dumps for tojson.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "jinja.hpp"
#include "utf8.hpp"

namespace meshrun::jinja {

void check_string_size(std::size_t size) {
  if (size > kMaxRenderBytes)
    throw RenderError{"a string of more than " + std::to_string(kMaxRenderBytes >> 20) +
                      " MiB; a chat template's text is far smaller (runaway repetition?)"};
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

void Dict::set(const std::string& key, Value value) {
  if (Value* existing = find(key)) *existing = std::move(value);
  else items.emplace_back(key, std::move(value));
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null: return none();
    case nlohmann::json::value_t::boolean: return boolean(json.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return integer(json.get<int64_t>());
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

std::string to_repr(const Value& v) {
  using K = Value::Kind;
  switch (v.kind) {
    case K::Undefined: return "Undefined";
    case K::None: return "None";
    case K::Bool: return v.b ? "True" : "False";
    case K::Int: return std::to_string(v.i);
    case K::Float: return float_repr(v.f);
    case K::String: return string_repr(v.s);
    case K::List: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t i = 0; i < v.list->size(); ++i) out += (i ? ", " : "") + to_repr((*v.list)[i]);
      if (v.tuple) return out + (v.list->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case K::Dict: {
      std::string out = v.dict->is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < v.dict->items.size(); ++i)
        out += (i ? ", " : "") + string_repr(v.dict->items[i].first) + ": " + to_repr(v.dict->items[i].second);
      return out + (v.dict->is_namespace ? "}>" : "}");
    }
    case K::Function: return "<function>";
  }
  return "";
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
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
        if (!equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    case K::Dict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [key, value] : a.dict->items) {
        const Value* other = b.dict->find(key);
        if (!other || !equal(value, *other)) return false;
      }
      return true;
    case K::Function: return a.function == b.function;
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind != K::Float && b.kind != K::Float)
      return (a.kind == K::Bool ? a.b : a.i) < (b.kind == K::Bool ? b.b : b.i);
    return a.as_double() < b.as_double();
  }
  if (a.kind == K::String && b.kind == K::String) return a.s < b.s;
  if (a.kind == K::List && b.kind == K::List) {
    for (size_t i = 0; i < a.list->size() && i < b.list->size(); ++i) {
      if (less((*a.list)[i], (*b.list)[i])) return true;
      if (less((*b.list)[i], (*a.list)[i])) return false;
    }
    return a.list->size() < b.list->size();
  }
  throw RenderError{"'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'"};
}

std::string to_json(const Value& v, int indent) {
  std::string out;
  json_dump(out, v, indent, 0);
  return out;
}

}  // namespace meshrun::jinja
