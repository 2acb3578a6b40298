// Renders a parsed template: scopes (a for loop or macro call has its own;
// `set` inside it does not leak out, hence namespace()), loop variables,
// operators with Python semantics, and errors that carry the template line.
#include <cmath>
#include <limits>

#include "jinja.hpp"

namespace meshrun::jinja {
namespace {

using EK = Expr::Kind;
using VK = Value::Kind;

struct LoopControl {
  enum Kind { None, Break, Continue } kind = None;
};

// Python's integers never overflow; a chat template's never need more than
// 64 bits, so a result beyond them is an error rather than undefined
// behaviour (fuzz/jinja_fuzz.cpp found `*`).
[[noreturn]] void integer_overflow(const std::string& op, int64_t x, int64_t y) {
  throw RenderError{"integer overflow: " + std::to_string(x) + " " + op + " " + std::to_string(y) +
                    " does not fit in 64 bits"};
}

// x ** y for y >= 0 by squaring: 1 ** 10**18 takes 60 steps, not 10**18.
int64_t integer_power(int64_t x, int64_t y) {
  int64_t result = 1, base = x;
  for (uint64_t e = static_cast<uint64_t>(y); e != 0; e >>= 1) {
    if ((e & 1) && __builtin_mul_overflow(result, base, &result)) integer_overflow("**", x, y);
    // Squared only while a higher bit still needs it: then the result would overflow too.
    if ((e >> 1) != 0 && __builtin_mul_overflow(base, base, &base)) integer_overflow("**", x, y);
  }
  return result;
}

int64_t python_floor_div(int64_t a, int64_t b) {
  if (a == std::numeric_limits<int64_t>::min() && b == -1) integer_overflow("//", a, b);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t python_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // INT64_MIN % -1 is undefined in C++
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (a.is(VK::Undefined) || b.is(VK::Undefined))
    throw RenderError{"'" + (a.is(VK::Undefined) ? a.s : b.s) + "' is undefined"};
  if (op == "+") {
    if (a.is(VK::String) && b.is(VK::String)) return Value::string(a.s + b.s);
    if (a.is(VK::List) && b.is(VK::List)) {
      check_list_size(a.list->size() + b.list->size());
      List items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(items));
    }
  }
  if (op == "*") {
    const Value* seq = a.is(VK::String) || a.is(VK::List) ? &a : b.is(VK::String) || b.is(VK::List) ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq && (count->is(VK::Int) || count->is(VK::Bool))) {
      const int64_t n = count->is(VK::Bool) ? count->b : count->i;
      // The size before building: 'x' * 10**11 must not allocate.
      const std::size_t unit = seq->is(VK::String) ? seq->s.size() : seq->list->size();
      // Empty, whatever the count: '' * 10**18 must not loop 10**18 times.
      if (unit == 0 || n <= 0) return seq->is(VK::String) ? Value::string("") : Value::make_list({});
      if (n > 0 && unit > 0) {
        const std::size_t bound = seq->is(VK::String) ? kMaxRenderBytes : kMaxRenderItems;
        if (static_cast<uint64_t>(n) > bound / unit) {
          if (seq->is(VK::String)) check_string_size(bound + 1);
          check_list_size(bound + 1);
        }
      }
      if (seq->is(VK::String)) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq->s;
        return Value::string(out);
      }
      // Charged before copying: each copy of an item copies its string.
      const std::size_t per_copy = shallow_bytes(*seq->list);
      charge_creation(static_cast<uint64_t>(n) > kMaxRenderCreatedBytes / per_copy ? kMaxRenderCreatedBytes + 1
                                                                                    : static_cast<std::size_t>(n) * per_copy);
      List items;
      for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq->list->begin(), seq->list->end());
      return Value::make_list(std::move(items));
    }
  }
  if (!a.is_number() || !b.is_number())
    throw RenderError{"unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'"};
  const bool integral = !a.is(VK::Float) && !b.is(VK::Float);
  const int64_t x = a.is(VK::Bool) ? a.b : a.i, y = b.is(VK::Bool) ? b.b : b.i;
  const double fx = a.as_double(), fy = b.as_double();
  int64_t r = 0;
  if (op == "+") {
    if (!integral) return Value::real(fx + fy);
    if (__builtin_add_overflow(x, y, &r)) integer_overflow(op, x, y);
    return Value::integer(r);
  }
  if (op == "-") {
    if (!integral) return Value::real(fx - fy);
    if (__builtin_sub_overflow(x, y, &r)) integer_overflow(op, x, y);
    return Value::integer(r);
  }
  if (op == "*") {
    if (!integral) return Value::real(fx * fy);
    if (__builtin_mul_overflow(x, y, &r)) integer_overflow(op, x, y);
    return Value::integer(r);
  }
  if (op == "/") {
    if (fy == 0) throw RenderError{"division by zero"};
    return Value::real(fx / fy);
  }
  if (op == "//") {
    if (fy == 0) throw RenderError{"integer division or modulo by zero"};
    return integral ? Value::integer(python_floor_div(x, y)) : Value::real(std::floor(fx / fy));
  }
  if (op == "%") {
    if (fy == 0) throw RenderError{"integer division or modulo by zero"};
    if (integral) return Value::integer(python_mod(x, y));
    double r = std::fmod(fx, fy);
    if (r != 0 && ((r < 0) != (fy < 0))) r += fy;
    return Value::real(r);
  }
  if (op == "**") {
    if (integral && y >= 0) return Value::integer(integer_power(x, y));
    return Value::real(std::pow(fx, fy));
  }
  throw RenderError{"unknown operator " + op};
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case VK::String:
      if (!item.is(VK::String))
        throw RenderError{"'in <string>' requires string as left operand, not " + type_name(item)};
      return container.s.find(item.s) != std::string::npos;
    case VK::List:
      for (const Value& v : *container.list)
        if (equal(v, item)) return true;
      return false;
    case VK::Dict: return item.is(VK::String) && container.dict->find(item.s) != nullptr;
    case VK::Undefined: return false;
    default: throw RenderError{"argument of type '" + type_name(container) + "' is not iterable"};
  }
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return !less(b, a);
  if (op == ">=") return !less(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  throw RenderError{"unknown comparison " + op};
}

int64_t slice_bound(const Value& v, int64_t size, int64_t fallback) {
  if (v.is(VK::None) || v.is(VK::Undefined)) return fallback;
  if (!v.is(VK::Int)) throw RenderError{"slice indices must be integers"};
  int64_t i = v.i;
  if (i < 0) i += size;
  return i;
}

class Renderer {
 public:
  Renderer(const Dict& variables, std::vector<std::pair<size_t, size_t>>* generation) : generation_(generation) {
    scopes_.push_back(variables);
  }

  void render(const Body& body, std::string& out) {
    const CreationBudget budget;
    output_ = &out;
    LoopControl control;
    render_body(body, out, control);
  }

 private:
  void render_body(const Body& body, std::string& out, LoopControl& control) {
    for (const auto& node : body) {
      render_node(*node, out, control);
      if (control.kind != LoopControl::None) return;
    }
  }

  // One unit of work; a template that does more is stopped (an endless or
  // huge loop, or nested loops multiplying up).
  void step() {
    if (++steps_ > kMaxRenderSteps)
      throw RenderError{"the template ran past " + std::to_string(kMaxRenderSteps) +
                        " steps (a huge or endless loop?)"};
  }

  // Evaluation recurses per tree level, and a macro call renders its body
  // inside the expression that calls it, so nesting times recursion could
  // exhaust the stack; one count of the frames in progress, with one cap,
  // bounds them together.
  class Frame {
   public:
    explicit Frame(Renderer& renderer) : renderer_(renderer) {
      if (++renderer_.depth_ > kMaxRenderDepth)
        throw RenderError{"expressions, blocks and macro calls nested deeper than " +
                          std::to_string(kMaxRenderDepth) + " levels (endless recursion?)"};
    }
    ~Frame() { --renderer_.depth_; }
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;

   private:
    Renderer& renderer_;
  };

  void render_node(const Node& node, std::string& out, LoopControl& control) {
    try {
      const Frame frame(*this);
      step();
      switch (node.kind) {
        case Node::Kind::Text:
          out += node.text;
          check_string_size(out.size());
          return;
        case Node::Kind::Output:
          out += to_str(eval(*node.exprs[0]));
          check_string_size(out.size());
          return;
        case Node::Kind::If:
          for (size_t i = 0; i < node.exprs.size(); ++i)
            if (truthy(eval(*node.exprs[i]))) return render_body(node.bodies[i], out, control);
          if (node.has_else) render_body(node.bodies.back(), out, control);
          return;
        case Node::Kind::For: return render_for(node, out);
        case Node::Kind::Set: return assign(node.targets[0], eval(*node.exprs[0]));
        case Node::Kind::SetBlock: {
          std::string text;
          render_body(node.bodies[0], text, control);
          return assign(node.targets[0], Value::string(text));
        }
        case Node::Kind::Macro: return define_macro(node);
        case Node::Kind::Break: control.kind = LoopControl::Break; return;
        case Node::Kind::Continue: control.kind = LoopControl::Continue; return;
        case Node::Kind::Generation: {
          const size_t begin = out.size();
          render_body(node.bodies[0], out, control);
          if (generation_ && &out == output_ && out.size() > begin) generation_->emplace_back(begin, out.size());
          return;
        }
      }
    } catch (RenderError& error) {
      if (error.message.rfind("line ", 0) != 0) error.message = "line " + std::to_string(node.line) + ": " + error.message;
      throw;
    }
  }

  void assign(const std::string& target, Value value) {
    const size_t dot = target.find('.');
    if (dot == std::string::npos) {
      scopes_.back().set(target, std::move(value));
      return;
    }
    Value object = lookup(target.substr(0, dot));
    if (!object.is(VK::Dict) || !object.dict->is_namespace)
      throw RenderError{"cannot assign attribute on non-namespace object '" + target.substr(0, dot) + "'"};
    object.dict->set(target.substr(dot + 1), std::move(value));
  }

  Value lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (const Value* v = it->find(name)) return *v;
    Value global = global_function(name);
    if (!global.is(VK::Undefined)) return global;
    return Value::undefined(name);
  }

  void render_for(const Node& node, std::string& out) {
    // A list is walked in place (its items are not copied for every loop
    // over it); anything else as the items iteration_items makes.
    const Value iterable = eval(*node.exprs[0]);
    List made;
    if (!iterable.is(VK::List)) made = iteration_items(iterable);
    const List& all = iterable.is(VK::List) ? *iterable.list : made;
    scopes_.emplace_back();
    auto bind = [&](const Value& item) {
      charge_creation(item.s.size());  // the copy the loop variable holds
      if (node.targets.size() == 1) {
        scopes_.back().set(node.targets[0], item);
        return;
      }
      List parts = iteration_items(item);
      if (parts.size() != node.targets.size())
        throw RenderError{"cannot unpack " + std::to_string(parts.size()) + " values into " +
                          std::to_string(node.targets.size()) + " loop variables"};
      for (size_t i = 0; i < parts.size(); ++i) scopes_.back().set(node.targets[i], parts[i]);
    };
    List filtered;
    if (node.has_filter) {
      for (const Value& item : all) {
        bind(item);
        if (truthy(eval(*node.exprs[1]))) filtered.push_back(item);
      }
    }
    const List& items = node.has_filter ? filtered : all;
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Dict loop;
      loop.set("index0", Value::integer(i));
      loop.set("index", Value::integer(i + 1));
      loop.set("revindex0", Value::integer(n - i - 1));
      loop.set("revindex", Value::integer(n - i));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("previtem"));
      loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("nextitem"));
      loop.set("cycle", Value::make_function([i](Args& args, Kwargs&) {
        if (args.empty()) throw RenderError{"no items for cycling given"};
        return args[static_cast<size_t>(i) % args.size()];
      }));
      step();
      scopes_.back().set("loop", Value::make_dict(std::move(loop)));
      bind(items[static_cast<size_t>(i)]);
      LoopControl control;
      render_body(node.bodies[0], out, control);
      if (control.kind == LoopControl::Break) break;
    }
    scopes_.pop_back();
    if (items.empty() && node.has_else) {
      LoopControl control;
      render_body(node.bodies[1], out, control);
    }
  }

  void define_macro(const Node& node) {
    const Node* macro = &node;
    scopes_.back().set(node.targets[0], Value::make_function([this, macro](Args& args, Kwargs& kwargs) {
      Dict frame;
      for (size_t i = 0; i < macro->params.size(); ++i) {
        Value value;
        if (i < args.size()) value = args[i];
        else if (macro->exprs[i]) value = eval(*macro->exprs[i]);
        else value = Value::undefined(macro->params[i]);
        for (auto& [name, v] : kwargs)
          if (name == macro->params[i]) value = v;
        frame.set(macro->params[i], value);
      }
      if (args.size() > macro->params.size())
        throw RenderError{"macro '" + macro->targets[0] + "' takes not more than " +
                          std::to_string(macro->params.size()) + " argument(s)"};
      if (macro_depth_ >= kMaxMacroDepth)
        throw RenderError{"macro '" + macro->targets[0] + "' calls nested deeper than " +
                          std::to_string(kMaxMacroDepth) + " (endless recursion?)"};
      ++macro_depth_;
      scopes_.push_back(std::move(frame));
      std::string text;
      LoopControl control;
      try {
        render_body(macro->bodies[0], text, control);
      } catch (...) {
        scopes_.pop_back();
        --macro_depth_;
        throw;
      }
      scopes_.pop_back();
      --macro_depth_;
      return Value::string(text);
    }));
  }

  void eval_arguments(const Expr& e, size_t first, Args& args, Kwargs& kwargs) {
    const size_t kw_start = e.children.size() - e.kwarg_names.size();
    for (size_t i = first; i < kw_start; ++i) args.push_back(eval(*e.children[i]));
    for (size_t i = kw_start; i < e.children.size(); ++i)
      kwargs.emplace_back(e.kwarg_names[i - kw_start], eval(*e.children[i]));
  }

  Value eval(const Expr& e) {
    const Frame frame(*this);
    step();
    switch (e.kind) {
      case EK::Literal: return e.literal;
      case EK::None_: return Value::none();
      case EK::Name: {
        Value value = lookup(e.name);
        charge_creation(value.s.size());  // a copy of the variable's string
        return value;
      }
      case EK::ListLit:
      case EK::TupleLit: {
        List items;
        for (const auto& child : e.children) items.push_back(eval(*child));
        Value list = Value::make_list(std::move(items));
        list.tuple = e.kind == EK::TupleLit;
        return list;
      }
      case EK::DictLit: {
        Dict dict;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value key = eval(*e.children[i]);
          if (!key.is(VK::String)) throw RenderError{"dict keys must be strings here, got " + type_name(key)};
          dict.set(key.s, eval(*e.children[i + 1]));
        }
        return Value::make_dict(std::move(dict));
      }
      case EK::Attr: {
        Value target = eval(*e.children[0]);
        if (target.is(VK::Undefined))
          throw RenderError{"'" + target.s + "' is undefined (reading its attribute '" + e.name + "')"};
        return get_attribute(target, e.name);
      }
      case EK::Item: {
        Value target = eval(*e.children[0]);
        if (target.is(VK::Undefined)) throw RenderError{"'" + target.s + "' is undefined (reading an item)"};
        return get_item(target, eval(*e.children[1]));
      }
      case EK::Slice: return slice(eval(*e.children[0]), eval(*e.children[1]), eval(*e.children[2]), eval(*e.children[3]));
      case EK::Call: {
        Value callee = eval(*e.children[0]);
        if (!callee.is(VK::Function)) {
          const std::string what = e.children[0]->kind == EK::Name ? e.children[0]->name : type_name(callee);
          throw RenderError{"'" + what + "' is not callable" + (callee.is(VK::Undefined) ? " (undefined)" : "")};
        }
        Args args;
        Kwargs kwargs;
        eval_arguments(e, 1, args, kwargs);
        return (*callee.function)(args, kwargs);
      }
      case EK::Filter: {
        Value target = eval(*e.children[0]);
        Args args;
        Kwargs kwargs;
        eval_arguments(e, 1, args, kwargs);
        return apply_filter(e.name, std::move(target), args, kwargs);
      }
      case EK::Test: {
        Value target = eval(*e.children[0]);
        Args args;
        Kwargs kwargs;
        eval_arguments(e, 1, args, kwargs);
        return Value::boolean(apply_test(e.name, target, args) != e.negated);
      }
      case EK::Neg:
      case EK::Pos: {
        Value v = eval(*e.children[0]);
        if (!v.is_number()) throw RenderError{"bad operand type for unary " + std::string(e.kind == EK::Neg ? "-" : "+") +
                                              ": '" + type_name(v) + "'"};
        if (e.kind == EK::Pos) return v.is(VK::Bool) ? Value::integer(v.b) : v;
        if (v.is(VK::Float)) return Value::real(-v.f);
        const int64_t x = v.is(VK::Bool) ? v.b : v.i;
        if (x == std::numeric_limits<int64_t>::min()) integer_overflow("*", x, -1);
        return Value::integer(-x);
      }
      case EK::Not: return Value::boolean(!truthy(eval(*e.children[0])));
      case EK::And: {
        Value left = eval(*e.children[0]);
        return truthy(left) ? eval(*e.children[1]) : left;
      }
      case EK::Or: {
        Value left = eval(*e.children[0]);
        return truthy(left) ? left : eval(*e.children[1]);
      }
      case EK::Binary: return arithmetic(e.name, eval(*e.children[0]), eval(*e.children[1]));
      case EK::Compare: {
        Value left = eval(*e.children[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.children[i + 1]);
          if (!compare(e.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case EK::Cond: return truthy(eval(*e.children[1])) ? eval(*e.children[0]) : eval(*e.children[2]);
    }
    return Value::undefined();
  }

  static Value slice(const Value& target, const Value& start_v, const Value& stop_v, const Value& step_v) {
    int64_t step = 1;
    if (step_v.is(VK::Int)) step = step_v.i;
    if (step == 0) throw RenderError{"slice step cannot be zero"};
    std::u32string chars;
    int64_t size = 0;
    if (target.is(VK::List)) size = static_cast<int64_t>(target.list->size());
    else if (target.is(VK::String)) size = static_cast<int64_t>((chars = code_points(target.s)).size());
    else throw RenderError{"'" + type_name(target) + "' object is not subscriptable"};
    int64_t start = slice_bound(start_v, size, step > 0 ? 0 : size - 1);
    int64_t stop = slice_bound(stop_v, size, step > 0 ? size : -1);
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, size);
      stop = std::clamp<int64_t>(stop, 0, size);
    } else {
      if (!(start_v.is(VK::None) || start_v.is(VK::Undefined))) start = std::clamp<int64_t>(start, -1, size - 1);
      if (!(stop_v.is(VK::None) || stop_v.is(VK::Undefined))) stop = std::clamp<int64_t>(stop, -1, size - 1);
    }
    List items;
    std::u32string text;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (target.is(VK::List)) items.push_back((*target.list)[static_cast<size_t>(i)]);
      else text += chars[static_cast<size_t>(i)];
      // Stops before i + step could overflow ('abc'[1::2**63-1]).
      if (step > 0 ? step >= stop - i : step <= stop - i) break;
    }
    return target.is(VK::List) ? Value::make_list(std::move(items)) : Value::string(utf8(text));
  }

  std::vector<Dict> scopes_;
  std::vector<std::pair<size_t, size_t>>* generation_;  // nullptr: not tracked
  const std::string* output_ = nullptr;                  // the template's own output
  int64_t steps_ = 0;
  int macro_depth_ = 0;
  int depth_ = 0;  // Frames in progress
};

}  // namespace

List iteration_items(const Value& v) {
  switch (v.kind) {
    case VK::List:
      charge_creation(shallow_bytes(*v.list));
      return *v.list;
    case VK::Dict: {
      List keys;
      for (const auto& item : v.dict->items) keys.push_back(Value::string(item.first));
      return keys;
    }
    case VK::String: {
      List chars;
      for (char32_t c : code_points(v.s)) chars.push_back(Value::string(utf8(std::u32string(1, c))));
      return chars;
    }
    case VK::Undefined: return {};
    default: throw RenderError{"'" + type_name(v) + "' object is not iterable"};
  }
}

namespace {

bool body_marks_generation(const Body& body) {
  for (const auto& node : body) {
    if (node->kind == Node::Kind::Generation) return true;
    for (const Body& inner : node->bodies)
      if (body_marks_generation(inner)) return true;
  }
  return false;
}

}  // namespace

bool marks_generation(const Template& tmpl) { return body_marks_generation(tmpl.body); }

std::string render(const Template& tmpl, const Dict& variables, std::vector<std::pair<size_t, size_t>>* generation) {
  Renderer renderer(variables, generation);
  std::string out;
  renderer.render(tmpl.body, out);
  return out;
}

}  // namespace meshrun::jinja
