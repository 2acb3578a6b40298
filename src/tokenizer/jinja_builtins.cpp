// The filters, tests, methods and global functions chat templates use.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <limits>

#include <utf8proc.h>

#include "jinja.hpp"

namespace meshrun::jinja {
namespace {

using VK = Value::Kind;

bool is_py_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Python's str.strip/lstrip/rstrip.
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::u32string text = code_points(s), set;
  const bool custom = chars && chars->is(VK::String);
  if (custom) set = code_points(chars->s);
  auto strippable = [&](char32_t c) { return custom ? set.find(c) != std::u32string::npos : is_py_space(c); };
  size_t begin = 0, end = text.size();
  if (left)
    while (begin < end && strippable(text[begin])) ++begin;
  if (right)
    while (end > begin && strippable(text[end - 1])) --end;
  return utf8(text.substr(begin, end - begin));
}

std::string ascii_case(std::string s, bool upper) {
  // Python changes the case of every cased letter, not only ASCII ones
  // ("École"|lower is "école"): utf8proc's simple case mapping, and the
  // one full mapping templates meet, ß → SS. Invalid bytes pass through.
  std::string out;
  out.reserve(s.size());
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  for (size_t at = 0; at < s.size();) {
    utf8proc_int32_t code = 0;
    const utf8proc_ssize_t length =
        utf8proc_iterate(bytes + at, static_cast<utf8proc_ssize_t>(s.size() - at), &code);
    if (length <= 0) {
      out.push_back(s[at++]);
      continue;
    }
    at += static_cast<size_t>(length);
    if (upper && code == 0xDF) {
      out += "SS";
      continue;
    }
    utf8proc_uint8_t encoded[4];
    const utf8proc_ssize_t written =
        utf8proc_encode_char(upper ? utf8proc_toupper(code) : utf8proc_tolower(code), encoded);
    out.append(reinterpret_cast<const char*>(encoded), static_cast<size_t>(written));
  }
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t found = s.find(from, pos);
    if (found == std::string::npos) break;
    out.append(s, pos, found - pos);
    out += to;
    check_string_size(out.size());
    pos = found + from.size();
    ++done;
  }
  out.append(s, pos);
  return out;
}

const Value* kwarg(Kwargs& kwargs, const std::string& name) {
  for (auto& [key, value] : kwargs)
    if (key == name) return &value;
  return nullptr;
}

const Value* argument(Args& args, Kwargs& kwargs, size_t index, const std::string& name) {
  if (index < args.size()) return &args[index];
  return kwarg(kwargs, name);
}

const std::string& want_string(const Value& v, const char* what) {
  if (!v.is(VK::String)) throw RenderError{std::string(what) + " expects a string, got " + type_name(v)};
  return v.s;
}

int64_t length_of(const Value& v) {
  switch (v.kind) {
    case VK::String: return static_cast<int64_t>(code_points(v.s).size());
    case VK::List: return static_cast<int64_t>(v.list->size());
    case VK::Dict: return static_cast<int64_t>(v.dict->items.size());
    case VK::Undefined: return 0;
    default: throw RenderError{"object of type '" + type_name(v) + "' has no len()"};
  }
}

Value string_method(const std::string& s, const std::string& name) {
  auto bind = [&](auto body) { return Value::make_function([s, body](Args& args, Kwargs& kwargs) { return body(s, args, kwargs); }); };
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return bind([starts](const std::string& self, Args& args, Kwargs&) {
      if (args.empty()) throw RenderError{"startswith/endswith need an argument"};
      List options = args[0].is(VK::List) ? *args[0].list : List{args[0]};
      for (const Value& option : options) {
        const std::string& o = want_string(option, "startswith/endswith");
        if (starts ? self.rfind(o, 0) == 0 : (self.size() >= o.size() && self.compare(self.size() - o.size(), o.size(), o) == 0))
          return Value::boolean(true);
      }
      return Value::boolean(false);
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return bind([left, right](const std::string& self, Args& args, Kwargs&) {
      return Value::string(strip(self, args.empty() ? nullptr : &args[0], left, right));
    });
  }
  if (name == "upper" || name == "lower") {
    const bool upper = name == "upper";
    return bind([upper](const std::string& self, Args&, Kwargs&) { return Value::string(ascii_case(self, upper)); });
  }
  if (name == "replace") {
    return bind([](const std::string& self, Args& args, Kwargs&) {
      if (args.size() < 2) throw RenderError{"replace() takes at least 2 arguments"};
      return Value::string(replace_all(self, want_string(args[0], "replace"), want_string(args[1], "replace"),
                                       args.size() > 2 && args[2].is(VK::Int) ? args[2].i : -1));
    });
  }
  if (name == "split") {
    return bind([](const std::string& self, Args& args, Kwargs&) {
      List parts;
      if (args.empty() || args[0].is(VK::None)) {
        std::u32string text = code_points(self), current;
        for (char32_t c : text) {
          if (is_py_space(c)) {
            if (!current.empty()) parts.push_back(Value::string(utf8(current)));
            current.clear();
          } else {
            current += c;
          }
        }
        if (!current.empty()) parts.push_back(Value::string(utf8(current)));
        return Value::make_list(std::move(parts));
      }
      const std::string& sep = want_string(args[0], "split");
      if (sep.empty()) throw RenderError{"empty separator"};
      int64_t max_splits = args.size() > 1 && args[1].is(VK::Int) ? args[1].i : -1;
      size_t pos = 0;
      for (size_t found; max_splits != 0 && (found = self.find(sep, pos)) != std::string::npos; --max_splits) {
        parts.push_back(Value::string(self.substr(pos, found - pos)));
        pos = found + sep.size();
      }
      parts.push_back(Value::string(self.substr(pos)));
      return Value::make_list(std::move(parts));
    });
  }
  if (name == "title" || name == "capitalize") {
    const bool title = name == "title";
    return bind([title](const std::string& self, Args&, Kwargs&) {
      std::string out = self;
      bool start = true;
      for (char& c : out) {
        const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (letter) c = static_cast<char>(start ? std::toupper(c) : std::tolower(c));
        start = title ? !letter : false;
      }
      return Value::string(out);
    });
  }
  if (name == "join") {
    return bind([](const std::string& self, Args& args, Kwargs&) {
      std::string out;
      List items = args.empty() ? List{} : iteration_items(args[0]);
      for (size_t i = 0; i < items.size(); ++i) out += (i ? self : "") + want_string(items[i], "join");
      return Value::string(out);
    });
  }
  if (name == "count" || name == "find") {
    const bool count = name == "count";
    return bind([count](const std::string& self, Args& args, Kwargs&) {
      if (args.empty()) throw RenderError{"count/find need an argument"};
      const std::string& needle = want_string(args[0], "count/find");
      if (!count) {
        const size_t found = self.find(needle);
        return Value::integer(found == std::string::npos ? -1 : static_cast<int64_t>(code_points(self.substr(0, found)).size()));
      }
      int64_t n = 0;
      for (size_t pos = 0; !needle.empty() && (pos = self.find(needle, pos)) != std::string::npos; pos += needle.size()) ++n;
      return Value::integer(n);
    });
  }
  return Value::undefined(name);
}

Value dict_method(const std::shared_ptr<Dict>& dict, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::make_function([dict, name](Args&, Kwargs&) {
      List out;
      for (const auto& [key, value] : dict->items) {
        if (name == "items") {
          out.push_back(Value::make_list({Value::string(key), value}));
          out.back().tuple = true;
        } else {
          out.push_back(name == "keys" ? Value::string(key) : value);
        }
      }
      return Value::make_list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::make_function([dict](Args& args, Kwargs&) {
      if (args.empty()) throw RenderError{"get() needs a key"};
      const Value* found = args[0].is(VK::String) ? dict->find(args[0].s) : nullptr;
      return found ? *found : args.size() > 1 ? args[1] : Value::none();
    });
  }
  return Value::undefined(name);
}

Value select_items(Value target, Args& args, bool select) {
  if (args.empty()) throw RenderError{"selectattr/rejectattr need an attribute name"};
  const std::string attribute = want_string(args[0], "selectattr");
  List out;
  for (const Value& item : iteration_items(target)) {
    Value field = get_attribute(item, attribute);
    bool pass;
    if (args.size() > 1) {
      Args test_args(args.begin() + 2, args.end());
      pass = apply_test(want_string(args[1], "selectattr"), field, test_args);
    } else {
      pass = truthy(field);
    }
    if (pass == select) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

}  // namespace

Value get_attribute(const Value& target, const std::string& name) {
  if (target.is(VK::Dict)) {
    if (!target.dict->is_namespace) {
      Value method = dict_method(target.dict, name);
      if (!method.is(VK::Undefined)) return method;
    }
    const Value* found = target.dict->find(name);
    return found ? *found : Value::undefined(name);
  }
  if (target.is(VK::String)) return string_method(target.s, name);
  if (target.is(VK::List) && !name.empty() && std::all_of(name.begin(), name.end(), ::isdigit)) {
    // Not std::stoll: its out_of_range escapes the renderer (list.99999999999999999999).
    int64_t index = 0;
    const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), index);
    if (error != std::errc() || end != name.data() + name.size()) return Value::undefined(name);
    return get_item(target, Value::integer(index));
  }
  return Value::undefined(name);
}

Value get_item(const Value& target, const Value& key) {
  if (target.is(VK::Dict)) {
    if (key.is(VK::String)) {
      if (const Value* found = target.dict->find(key.s)) return *found;
      return target.dict->is_namespace ? Value::undefined(key.s) : dict_method(target.dict, key.s);
    }
    return Value::undefined(to_str(key));
  }
  if (target.is(VK::List) || target.is(VK::String)) {
    if (!key.is(VK::Int)) {
      if (key.is(VK::String) && target.is(VK::String)) return string_method(target.s, key.s);
      return Value::undefined(to_str(key));
    }
    std::u32string chars;
    const int64_t size = target.is(VK::List) ? static_cast<int64_t>(target.list->size())
                                             : static_cast<int64_t>((chars = code_points(target.s)).size());
    const int64_t index = key.i < 0 ? key.i + size : key.i;
    if (index < 0 || index >= size) return Value::undefined("[" + std::to_string(key.i) + "]");
    if (target.is(VK::List)) return (*target.list)[static_cast<size_t>(index)];
    return Value::string(utf8(std::u32string(1, chars[static_cast<size_t>(index)])));
  }
  return Value::undefined(to_str(key));
}

Value apply_filter(const std::string& name, Value target, Args& args, Kwargs& kwargs) {
  if (name == "trim") return Value::string(strip(to_str(target), argument(args, kwargs, 0, "chars"), true, true));
  if (name == "length" || name == "count") return Value::integer(length_of(target));
  if (name == "string") return Value::string(to_str(target));
  if (name == "upper" || name == "lower") return Value::string(ascii_case(to_str(target), name == "upper"));
  if (name == "capitalize" || name == "title") {
    Args none;
    Kwargs no_kwargs;
    return (*string_method(to_str(target), name).function)(none, no_kwargs);
  }
  if (name == "safe") return target;  // no autoescaping in chat templates: nothing to mark safe
  if (name == "e" || name == "escape") {
    // markupsafe.escape, which jinja2's filter is whatever the autoescape setting.
    const std::string text = to_str(target);
    std::string out;
    for (const char c : text) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return Value::string(std::move(out));
  }
  if (name == "tojson") {
    const Value* indent = argument(args, kwargs, 0, "indent");
    // Every line repeats the indent: a huge one is a huge string.
    if (indent && indent->is(VK::Int) && (indent->i < 0 || indent->i > 64))
      throw RenderError{"tojson indent " + std::to_string(indent->i) + " is outside 0..64"};
    return Value::string(to_json(target, indent && indent->is(VK::Int) ? static_cast<int>(indent->i) : -1));
  }
  if (name == "default" || name == "d") {
    const Value* fallback = argument(args, kwargs, 0, "default_value");
    const Value* boolean = argument(args, kwargs, 1, "boolean");
    const bool use_fallback = target.is(VK::Undefined) || (boolean && truthy(*boolean) && !truthy(target));
    return use_fallback ? (fallback ? *fallback : Value::string("")) : target;
  }
  if (name == "join") {
    const Value* separator = argument(args, kwargs, 0, "d");
    const Value* attribute = argument(args, kwargs, 1, "attribute");
    std::string out;
    List items = iteration_items(target);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i && separator) out += to_str(*separator);
      out += to_str(attribute ? get_attribute(items[i], to_str(*attribute)) : items[i]);
      check_string_size(out.size());
    }
    return Value::string(out);
  }
  if (name == "first" || name == "last") {
    List items = iteration_items(target);
    if (items.empty()) return Value::undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::make_list(iteration_items(target));
  if (name == "reverse") {
    if (target.is(VK::String)) {
      std::u32string chars = code_points(target.s);
      return Value::string(utf8(std::u32string(chars.rbegin(), chars.rend())));
    }
    List items = iteration_items(target);
    return Value::make_list(List(items.rbegin(), items.rend()));
  }
  if (name == "replace") {
    if (args.size() < 2) throw RenderError{"replace needs two arguments"};
    return Value::string(replace_all(to_str(target), to_str(args[0]), to_str(args[1]),
                                     args.size() > 2 && args[2].is(VK::Int) ? args[2].i : -1));
  }
  if (name == "int") {
    if (target.is(VK::Float)) {
      if (std::isnan(target.f)) return args.empty() ? Value::integer(0) : args[0];  // Python: ValueError
      // 2^63 exactly as a double; beyond it a cast is undefined behaviour.
      if (!(target.f > -9223372036854775808.0 && target.f < 9223372036854775808.0))
        throw RenderError{"int(" + to_str(target) + ") does not fit in 64 bits"};
      return Value::integer(static_cast<int64_t>(target.f));
    }
    if (target.is_number()) return Value::integer(target.is(VK::Bool) ? target.b : target.i);
    try {
      return Value::integer(std::stoll(strip(to_str(target), nullptr, true, true)));
    } catch (const std::exception&) {
      return args.empty() ? Value::integer(0) : args[0];
    }
  }
  if (name == "float") {
    if (target.is_number()) return Value::real(target.as_double());
    try {
      return Value::real(std::stod(to_str(target)));
    } catch (const std::exception&) {
      return args.empty() ? Value::real(0) : args[0];
    }
  }
  if (name == "abs") {
    if (target.is(VK::Float)) return Value::real(std::fabs(target.f));
    if (target.is(VK::Int)) {
      if (target.i == std::numeric_limits<int64_t>::min())
        throw RenderError{"abs(" + std::to_string(target.i) + ") does not fit in 64 bits"};
      return Value::integer(target.i < 0 ? -target.i : target.i);
    }
  }
  if (name == "items") {
    if (!target.is(VK::Dict)) throw RenderError{"items expects a mapping"};
    Args none;
    Kwargs no_kwargs;
    return (*get_attribute(target, "items").function)(none, no_kwargs);
  }
  if (name == "selectattr" || name == "rejectattr") return select_items(target, args, name == "selectattr");
  if (name == "select" || name == "reject") {
    List out;
    for (const Value& item : iteration_items(target)) {
      bool pass = truthy(item);
      if (!args.empty()) {
        Args test_args(args.begin() + 1, args.end());
        pass = apply_test(want_string(args[0], name.c_str()), item, test_args);
      }
      if (pass == (name == "select")) out.push_back(item);
    }
    return Value::make_list(std::move(out));
  }
  if (name == "map") {
    List out;
    const Value* attribute = kwarg(kwargs, "attribute");
    for (const Value& item : iteration_items(target)) {
      if (attribute) {
        out.push_back(get_attribute(item, to_str(*attribute)));
      } else {
        if (args.empty()) throw RenderError{"map needs a filter name or attribute="};
        Args rest(args.begin() + 1, args.end());
        Kwargs none;
        out.push_back(apply_filter(to_str(args[0]), item, rest, none));
      }
    }
    return Value::make_list(std::move(out));
  }
  throw RenderError{"unknown filter '" + name + "'"};
}

bool apply_test(const std::string& name, const Value& v, Args& args) {
  if (name == "defined") return !v.is(VK::Undefined);
  if (name == "undefined") return v.is(VK::Undefined);
  if (name == "none") return v.is(VK::None);
  if (name == "string") return v.is(VK::String);
  if (name == "number") return v.is(VK::Int) || v.is(VK::Float);
  if (name == "integer") return v.is(VK::Int);
  if (name == "float") return v.is(VK::Float);
  if (name == "boolean") return v.is(VK::Bool);
  if (name == "true") return v.is(VK::Bool) && v.b;
  if (name == "false") return v.is(VK::Bool) && !v.b;
  if (name == "mapping") return v.is(VK::Dict);
  if (name == "sequence") return v.is(VK::List) || v.is(VK::String) || v.is(VK::Dict);
  if (name == "iterable") return v.is(VK::List) || v.is(VK::String) || v.is(VK::Dict);
  if (name == "callable") return v.is(VK::Function);
  if (name == "lower") return v.is(VK::String) && ascii_case(v.s, false) == v.s;
  if (name == "upper") return v.is(VK::String) && ascii_case(v.s, true) == v.s;
  if (name == "odd" || name == "even") {
    if (!v.is(VK::Int)) throw RenderError{"odd/even expect an integer"};
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (args.empty()) throw RenderError{"unknown test '" + name + "' or it needs an argument"};
  const Value& other = args[0];
  if (name == "divisibleby") {
    if (!v.is(VK::Int) || !other.is(VK::Int) || other.i == 0) throw RenderError{"divisibleby expects integers"};
    return v.i % other.i == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, other);
  if (name == "ne" || name == "!=") return !equal(v, other);
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, other);
  if (name == "gt" || name == "greaterthan" || name == ">") return less(other, v);
  if (name == "le" || name == "<=") return !less(other, v);
  if (name == "ge" || name == ">=") return !less(v, other);
  if (name == "in") {
    if (other.is(VK::String)) return v.is(VK::String) && other.s.find(v.s) != std::string::npos;
    for (const Value& item : iteration_items(other))
      if (equal(item, v)) return true;
    return false;
  }
  if (name == "sameas") return equal(v, other) && v.kind == other.kind;
  throw RenderError{"unknown test '" + name + "'"};
}

Value global_function(const std::string& name) {
  if (name == "raise_exception") {
    return Value::make_function([](Args& args, Kwargs&) -> Value {
      throw RenderError{"raise_exception: " + (args.empty() ? std::string() : to_str(args[0]))};
    });
  }
  if (name == "strftime_now") {
    // transformers' chat-template global: datetime.now().strftime(format),
    // in local time (Llama 3.2/3.3 templates date their system header with
    // it). A format is short; one that formats past the buffer is an error.
    return Value::make_function([](Args& args, Kwargs&) -> Value {
      if (args.size() != 1 || !args[0].is(VK::String)) throw RenderError{"strftime_now() expects one format string"};
      if (args[0].s.size() > 256) throw RenderError{"strftime_now() format longer than 256 bytes"};
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      if (localtime_r(&now, &local) == nullptr) throw RenderError{"strftime_now(): the local time is unknown"};
      char text[1024];
      const std::size_t length = args[0].s.empty() ? 0 : std::strftime(text, sizeof text, args[0].s.c_str(), &local);
      if (length == 0 && !args[0].s.empty()) throw RenderError{"strftime_now(\"" + args[0].s + "\") formats to nothing or past 1 KiB"};
      return Value::string(std::string(text, length));
    });
  }
  if (name == "namespace" || name == "dict") {
    const bool is_namespace = name == "namespace";
    return Value::make_function([is_namespace](Args& args, Kwargs& kwargs) {
      Dict dict;
      dict.is_namespace = is_namespace;
      if (!args.empty() && args[0].is(VK::Dict)) dict.items = args[0].dict->items;
      for (auto& [key, value] : kwargs) dict.set(key, value);
      return Value::make_dict(std::move(dict));
    });
  }
  if (name == "range") {
    return Value::make_function([](Args& args, Kwargs&) {
      for (const Value& a : args)
        if (!a.is(VK::Int)) throw RenderError{"range() expects integers"};
      int64_t start = 0, stop = 0, step = 1;
      if (args.size() == 1) stop = args[0].i;
      else if (args.size() >= 2) start = args[0].i, stop = args[1].i;
      if (args.size() >= 3) step = args[2].i;
      if (step == 0) throw RenderError{"range() step must not be zero"};
      // The length before the list: range(2**40) must not allocate.
      const long double span = static_cast<long double>(stop) - static_cast<long double>(start);
      const long double length = span / static_cast<long double>(step);
      // Shown as uint64: range(-2**63, 2**63 - 1) has more items than an int64 counts.
      if (length > static_cast<long double>(kMaxRenderItems))
        throw RenderError{"range() of about " + std::to_string(static_cast<uint64_t>(length)) +
                          " items; a template list holds at most " + std::to_string(kMaxRenderItems)};
      List out;
      // Counted, not stepped past stop: start + step may not fit in 64 bits.
      // Unsigned differences are exact (and wrap back into range below).
      const uint64_t span_bits = step > 0 ? static_cast<uint64_t>(stop) - static_cast<uint64_t>(start)
                                          : static_cast<uint64_t>(start) - static_cast<uint64_t>(stop);
      const uint64_t step_bits = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
      const bool empty = step > 0 ? stop <= start : stop >= start;
      const uint64_t count = empty ? 0 : (span_bits - 1) / step_bits + 1;
      for (uint64_t k = 0; k < count; ++k)
        out.push_back(Value::integer(static_cast<int64_t>(static_cast<uint64_t>(start) + k * static_cast<uint64_t>(step))));
      return Value::make_list(std::move(out));
    });
  }
  return Value::undefined(name);
}

}  // namespace meshrun::jinja
