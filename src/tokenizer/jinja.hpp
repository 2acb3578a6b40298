// The chat-template interpreter behind meshrun/tokenizer/chat_template.hpp: values with
// Python semantics, the lexer, the parser's syntax tree and the renderer.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace meshrun::jinja {

struct Value;
using List = std::vector<Value>;
struct Dict {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, like Python
  bool is_namespace = false;
  Value* find(const std::string& key);
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(Args&, Kwargs&)>;

// What one render may use: a chat template comes from a model directory
// and is untrusted input, so loops, strings, lists and macro recursion are
// bounded (chat templates of real models use a tiny fraction of each). Past
// a bound, rendering throws RenderError saying which.
inline constexpr int64_t kMaxRenderSteps = 4'000'000;      // nodes, loop iterations, expressions
inline constexpr std::size_t kMaxRenderBytes = 32u << 20;  // any string, the output included
inline constexpr std::size_t kMaxRenderItems = 1u << 20;   // any list
inline constexpr int kMaxMacroDepth = 100;                  // macro calls in progress
// Expression evaluations and nodes in progress, macro calls' included: the
// renderer recurses per level, and this many levels stay far inside an
// 8 MiB stack (measured: macros recursing inside nested expressions reach
// it within a 1 MiB stack).
inline constexpr int kMaxRenderDepth = 1000;
// Lists and dicts inside each other: str(), tojson, == and < walk a value
// recursively.
inline constexpr int kMaxValueDepth = 512;

// Every string and list a render creates is charged to it (copies too: a
// list item's string is copied with it), so that what a template allocates
// in total, and the time spent copying, is bounded and not just each value:
// 'x' * 10**6 repeated in a list 10**6 times stops here.
inline constexpr std::size_t kMaxRenderCreatedBytes = std::size_t{512} << 20;

// The render in progress on this thread, while it lives.
class CreationBudget {
 public:
  CreationBudget();
  ~CreationBudget();
  CreationBudget(const CreationBudget&) = delete;
  CreationBudget& operator=(const CreationBudget&) = delete;
  void charge(std::size_t bytes);

 private:
  std::size_t used_ = 0;
  CreationBudget* previous_;
};
// Charges `bytes` to this thread's CreationBudget (none outside a render);
// throws RenderError past kMaxRenderCreatedBytes.
void charge_creation(std::size_t bytes);
// What copying `items` (not what the lists or dicts in it hold) allocates.
std::size_t shallow_bytes(const List& items);

// Throw RenderError when a string or list of `size` would pass its bound.
void check_string_size(std::size_t size);
void check_list_size(std::size_t size);
// Throw RenderError when a walk of a value reaches past kMaxValueDepth.
void check_value_depth(int depth);

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // String; for Undefined, the name that was not defined
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Function> function;
  bool tuple = false;  // a List written (a, b): printed with parentheses

  Value() = default;
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) noexcept = default;
  ~Value();  // without recursion, however deep the lists and dicts inside

  static Value undefined(std::string name = "") {
    Value v;
    v.s = std::move(name);
    return v;
  }
  static Value none() { return with_kind(Kind::None); }
  static Value boolean(bool value) {
    Value v = with_kind(Kind::Bool);
    v.b = value;
    return v;
  }
  static Value integer(int64_t value) {
    Value v = with_kind(Kind::Int);
    v.i = value;
    return v;
  }
  static Value real(double value) {
    Value v = with_kind(Kind::Float);
    v.f = value;
    return v;
  }
  static Value string(std::string value) {
    check_string_size(value.size());
    charge_creation(value.size());
    Value v = with_kind(Kind::String);
    v.s = std::move(value);
    return v;
  }
  static Value make_list(List items = {}) {
    check_list_size(items.size());
    charge_creation(shallow_bytes(items));
    Value v = with_kind(Kind::List);
    v.list = std::make_shared<List>(std::move(items));
    return v;
  }
  static Value make_dict(Dict dict = {}) {
    Value v = with_kind(Kind::Dict);
    v.dict = std::make_shared<Dict>(std::move(dict));
    return v;
  }
  static Value make_function(Function fn) {
    Value v = with_kind(Kind::Function);
    v.function = std::make_shared<Function>(std::move(fn));
    return v;
  }
  static Value from_json(const nlohmann::ordered_json& json);

  bool is(Kind k) const { return kind == k; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  double as_double() const { return kind == Kind::Float ? f : static_cast<double>(kind == Kind::Bool ? b : i); }

 private:
  static Value with_kind(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }
};

// Errors while parsing or rendering; the renderer adds the template line
// to `message`. A std::exception, so that no path (building the context,
// a caller that forgot to translate it) can end the process uncaught.
struct RenderError : std::exception {
  explicit RenderError(std::string text) : message(std::move(text)) {}
  const char* what() const noexcept override { return message.c_str(); }
  std::string message;
};

bool truthy(const Value& v);
std::string to_str(const Value& v);   // Python str()
std::string to_repr(const Value& v);  // Python repr()
bool equal(const Value& a, const Value& b);
// Python ordering for < (numbers, strings, lists); throws RenderError otherwise.
bool less(const Value& a, const Value& b);
std::string type_name(const Value& v);
// The items a for loop (and list(), join, map, ...) walks: a list's items, a
// dict's keys, a string's characters; nothing for undefined. Throws
// RenderError for anything else.
List iteration_items(const Value& v);
// json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=False)
std::string to_json(const Value& v, int indent = -1);
std::u32string code_points(const std::string& s);
std::string utf8(const std::u32string& s);

// ----- lexer -----
struct Token {
  enum class Kind { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };
  Kind kind;
  std::string text;
  int line;
};
// Throws RenderError with "line N: ..." on unterminated tags and strings.
std::vector<Token> lex(const std::string& source);

// ----- syntax tree -----
struct Expr {
  enum class Kind {
    Literal, Name, ListLit, DictLit, TupleLit, Attr, Item, Slice, Call, Filter, Test,
    Neg, Pos, Not, Binary, Compare, And, Or, Cond, None_  // None_: an omitted slice bound
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;               // Name, Attr, Filter, Test; Binary's operator
  std::vector<std::string> ops;   // Compare's operators
  std::vector<std::unique_ptr<Expr>> children;
  std::vector<std::string> kwarg_names;  // Call/Filter/Test: the last kwarg_names.size() children
  bool negated = false;           // Test
};
using ExprPtr = std::unique_ptr<Expr>;

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;
struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, Generation };
  Kind kind;
  int line = 0;
  std::string text;                      // Text
  std::vector<std::string> targets;      // For: loop variables; Set: name or name.attr; Macro: name
  std::vector<ExprPtr> exprs;            // Output: 1; If: conditions; For: iterable[, filter]; Set: value; Macro: defaults
  std::vector<std::string> params;       // Macro parameters
  std::vector<Body> bodies;              // If: one per condition (+ else); For: body[, else]; SetBlock/Macro/Generation: body
  bool has_else = false;
  bool has_filter = false;               // For ... if cond
};

struct Template {
  Body body;
};

Template parse(const std::vector<Token>& tokens);
// `generation`, when given, receives the [begin, end) byte ranges of the
// output that {% generation %} blocks wrote (blocks rendered into the
// output itself; one inside a macro or a set block is not tracked).
std::string render(const Template& tmpl, const Dict& variables, std::vector<std::pair<size_t, size_t>>* generation = nullptr);
// Whether the template has a {% generation %} block anywhere.
bool marks_generation(const Template& tmpl);

// Filters, tests, methods and globals (jinja_builtins.cpp).
Value apply_filter(const std::string& name, Value target, Args& args, Kwargs& kwargs);
bool apply_test(const std::string& name, const Value& target, Args& args);
// Attribute access: a dict's item or method, a string's method, loop fields.
Value get_attribute(const Value& target, const std::string& name);
Value get_item(const Value& target, const Value& key);
Value global_function(const std::string& name);

}  // namespace meshrun::jinja
