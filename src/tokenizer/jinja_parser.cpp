// Recursive-descent parser for chat-template Jinja, with Jinja's operator
// precedence: conditional < or < and < not < comparisons (in, is, ==, ...)
// < + - < ~ < * / // % < ** < unary - < filters and tests < postfix.
#include <algorithm>
#include <utility>

#include "jinja.hpp"

namespace meshrun::jinja {
namespace {

using TK = Token::Kind;
using EK = Expr::Kind;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  Template parse_template() {
    Template tmpl;
    std::string end = parse_body(tmpl.body, {});
    if (!end.empty()) fail("unexpected {% " + end + " %}");
    return tmpl;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  [[noreturn]] void fail(const std::string& message) const {
    throw RenderError{"line " + std::to_string(peek().line) + ": " + message};
  }
  bool at_op(const char* op) const { return peek().kind == TK::Op && peek().text == op; }
  bool at_name(const char* name) const { return peek().kind == TK::Name && peek().text == name; }
  bool accept_op(const char* op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(const char* name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "', got '" + peek().text + "'");
  }
  std::string expect_name() {
    if (peek().kind != TK::Name) fail("expected a name, got '" + peek().text + "'");
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TK::BlockEnd) fail("expected %}, got '" + peek().text + "'");
    next();
  }

  ExprPtr make(EK kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Parses nodes until one of `ends` ({% NAME %}); returns that name, having
  // consumed the NAME (not the rest of the tag), or "" at the end of input.
  std::string parse_body(Body& body, const std::vector<std::string>& ends) {
    const Nesting nesting(*this);
    while (true) {
      const Token& t = peek();
      if (t.kind == TK::End) {
        if (!ends.empty()) fail("missing {% " + ends.back() + " %}");
        return "";
      }
      if (t.kind == TK::Text) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::Text;
        node->text = t.text;
        node->line = t.line;
        body.push_back(std::move(node));
        next();
      } else if (t.kind == TK::VarBegin) {
        next();
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::Output;
        node->line = t.line;
        node->exprs.push_back(parse_expression());
        if (peek().kind != TK::VarEnd) fail("expected }}, got '" + peek().text + "'");
        next();
        body.push_back(std::move(node));
      } else if (t.kind == TK::BlockBegin) {
        next();
        const std::string keyword = expect_name();
        if (std::find(ends.begin(), ends.end(), keyword) != ends.end()) return keyword;
        body.push_back(parse_statement(keyword, t.line));
      } else {
        fail("unexpected '" + t.text + "'");
      }
    }
  }

  std::unique_ptr<Node> parse_statement(const std::string& keyword, int line) {
    auto node = std::make_unique<Node>();
    node->line = line;
    if (keyword == "if") {
      node->kind = Node::Kind::If;
      node->exprs.push_back(parse_expression());
      expect_block_end();
      while (true) {
        node->bodies.emplace_back();
        const std::string end = parse_body(node->bodies.back(), {"elif", "else", "endif"});
        if (end == "elif") {
          node->exprs.push_back(parse_expression());
          expect_block_end();
        } else if (end == "else") {
          expect_block_end();
          node->has_else = true;
          node->bodies.emplace_back();
          parse_body(node->bodies.back(), {"endif"});
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (keyword == "for") {
      node->kind = Node::Kind::For;
      node->targets.push_back(expect_name());
      while (accept_op(",")) node->targets.push_back(expect_name());
      if (!accept_name("in")) fail("expected 'in' in for loop");
      node->exprs.push_back(parse_or_conditional(false));
      if (accept_name("if")) {
        node->has_filter = true;
        node->exprs.push_back(parse_or_conditional(false));
      }
      accept_name("recursive");
      expect_block_end();
      node->bodies.emplace_back();
      ++loop_depth_;
      const std::string end = parse_body(node->bodies.back(), {"else", "endfor"});
      --loop_depth_;
      expect_block_end();
      if (end == "else") {
        node->has_else = true;
        node->bodies.emplace_back();
        parse_body(node->bodies.back(), {"endfor"});
        expect_block_end();
      }
    } else if (keyword == "set") {
      std::string target = expect_name();
      if (accept_op(".")) target += "." + expect_name();
      node->targets.push_back(target);
      if (accept_op("=")) {
        node->kind = Node::Kind::Set;
        node->exprs.push_back(parse_expression());
        expect_block_end();
      } else {
        node->kind = Node::Kind::SetBlock;
        expect_block_end();
        node->bodies.emplace_back();
        parse_body(node->bodies.back(), {"endset"});
        expect_block_end();
      }
    } else if (keyword == "macro") {
      node->kind = Node::Kind::Macro;
      node->targets.push_back(expect_name());
      expect_op("(");
      while (!accept_op(")")) {
        node->params.push_back(expect_name());
        node->exprs.push_back(accept_op("=") ? parse_expression() : nullptr);
        if (!at_op(")")) expect_op(",");
      }
      expect_block_end();
      node->bodies.emplace_back();
      // A macro's body is not inside the loop around its definition (its
      // calls may come from anywhere): Jinja2 refuses a break there too.
      const int outer_loops = std::exchange(loop_depth_, 0);
      parse_body(node->bodies.back(), {"endmacro"});
      loop_depth_ = outer_loops;
      if (peek().kind == TK::Name) next();  // {% endmacro name %}
      expect_block_end();
    } else if (keyword == "break" || keyword == "continue") {
      // Jinja2 refuses these outside a loop when it compiles the template;
      // rendered, they would end the template early without a word.
      if (loop_depth_ == 0) fail("{% " + keyword + " %} outside a {% for %} loop");
      node->kind = keyword == "break" ? Node::Kind::Break : Node::Kind::Continue;
      expect_block_end();
    } else if (keyword == "generation") {
      // Hugging Face's {% generation %} marks assistant text: it renders as
      // is, and the renderer reports where (the SFT loss mask).
      expect_block_end();
      node->kind = Node::Kind::Generation;
      node->bodies.emplace_back();
      parse_body(node->bodies.back(), {"endgeneration"});
      expect_block_end();
    } else {
      fail("unknown tag {% " + keyword + " %}");
    }
    return node;
  }

  ExprPtr parse_expression() { return parse_or_conditional(true); }

  ExprPtr parse_or_conditional(bool with_conditional) {
    const Nesting nesting(*this);
    ExprPtr value = parse_or();
    if (!with_conditional) return value;
    Chain chain(*this);
    while (at_name("if")) {
      chain.link();
      const int line = next().line;
      auto cond = make(EK::Cond, line);
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (accept_name("else")) otherwise = parse_or_conditional(true);
      else otherwise = make(EK::Literal, line);  // an undefined value
      cond->children.push_back(std::move(value));
      cond->children.push_back(std::move(test));
      cond->children.push_back(std::move(otherwise));
      value = std::move(cond);
    }
    return value;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    Chain chain(*this);
    while (at_name("or")) {
      chain.link();
      auto e = make(EK::Or, next().line);
      e->children.push_back(std::move(left));
      e->children.push_back(parse_and());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    Chain chain(*this);
    while (at_name("and")) {
      chain.link();
      auto e = make(EK::And, next().line);
      e->children.push_back(std::move(left));
      e->children.push_back(parse_not());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_not() {
    const Nesting nesting(*this);
    if (at_name("not")) {
      auto e = make(EK::Not, next().line);
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (peek().kind == TK::Op &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && peek(1).kind == TK::Name && peek(1).text == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(EK::Compare, first->line);
        cmp->children.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right) {
    auto e = make(EK::Binary, left->line);
    e->name = op;
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    Chain chain(*this);
    while (at_op("+") || at_op("-")) {
      chain.link();
      std::string op = next().text;
      left = binary(op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    Chain chain(*this);
    while (accept_op("~")) {
      chain.link();
      left = binary("~", std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    Chain chain(*this);
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      chain.link();
      std::string op = next().text;
      left = binary(op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    Chain chain(*this);
    while (accept_op("**")) {
      chain.link();
      left = binary("**", std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Nesting nesting(*this);
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      const Token& t = next();
      node = make(t.text == "-" ? EK::Neg : EK::Pos, t.line);
      node->children.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filters_and_tests(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    if (t.kind == TK::String) {
      auto e = make(EK::Literal, t.line);
      std::string text = next().text;
      while (peek().kind == TK::String) text += next().text;  // adjacent literals concatenate
      e->literal = Value::string(text);
      return e;
    }
    if (t.kind == TK::Int || t.kind == TK::Float) {
      auto e = make(EK::Literal, t.line);
      try {
        e->literal = t.kind == TK::Int ? Value::integer(std::stoll(t.text)) : Value::real(std::stod(t.text));
      } catch (const std::exception&) {
        fail("number out of range: " + t.text);
      }
      next();
      return e;
    }
    if (t.kind == TK::Name) {
      next();
      auto e = make(EK::Literal, t.line);
      if (t.text == "true" || t.text == "True") e->literal = Value::boolean(true);
      else if (t.text == "false" || t.text == "False") e->literal = Value::boolean(false);
      else if (t.text == "none" || t.text == "None") e->literal = Value::none();
      else {
        e->kind = EK::Name;
        e->name = t.text;
      }
      return e;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return make(EK::TupleLit, t.line);
      ExprPtr first = parse_expression();
      if (accept_op(")")) return first;
      auto tuple = make(EK::TupleLit, t.line);
      tuple->children.push_back(std::move(first));
      while (accept_op(",")) {
        if (at_op(")")) break;
        tuple->children.push_back(parse_expression());
      }
      expect_op(")");
      return tuple;
    }
    if (accept_op("[")) {
      auto list = make(EK::ListLit, t.line);
      while (!accept_op("]")) {
        list->children.push_back(parse_expression());
        if (!at_op("]")) expect_op(",");
      }
      return list;
    }
    if (accept_op("{")) {
      auto dict = make(EK::DictLit, t.line);
      while (!accept_op("}")) {
        dict->children.push_back(parse_expression());
        expect_op(":");
        dict->children.push_back(parse_expression());
        if (!at_op("}")) expect_op(",");
      }
      return dict;
    }
    fail("unexpected '" + t.text + "' in an expression");
  }

  void parse_call_arguments(Expr& call) {
    // After '(': positional arguments, then name=value ones.
    std::vector<ExprPtr> kwargs;
    while (!accept_op(")")) {
      if (peek().kind == TK::Name && peek(1).kind == TK::Op && peek(1).text == "=") {
        call.kwarg_names.push_back(next().text);
        next();
        kwargs.push_back(parse_expression());
      } else {
        if (!kwargs.empty()) fail("a positional argument after a keyword argument");
        call.children.push_back(parse_expression());
      }
      if (!at_op(")")) expect_op(",");
    }
    for (auto& kwarg : kwargs) call.children.push_back(std::move(kwarg));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    Chain chain(*this);
    while (true) {
      if (at_op(".") || at_op("[") || at_op("(")) chain.link();
      if (at_op(".")) {
        const int line = next().line;
        auto e = make(EK::Attr, line);
        if (peek().kind == TK::Int) e->name = next().text;
        else e->name = expect_name();
        e->children.push_back(std::move(node));
        node = std::move(e);
      } else if (at_op("[")) {
        const int line = next().line;
        ExprPtr index[3];
        bool slice = false;
        for (int part = 0; part < 3; ++part) {
          if (!at_op(":") && !at_op("]")) index[part] = parse_expression();
          if (part < 2 && accept_op(":")) {
            slice = true;
            continue;
          }
          break;
        }
        expect_op("]");
        if (!slice) {
          if (!index[0]) fail("empty subscript");
          auto e = make(EK::Item, line);
          e->children.push_back(std::move(node));
          e->children.push_back(std::move(index[0]));
          node = std::move(e);
        } else {
          auto e = make(EK::Slice, line);
          e->children.push_back(std::move(node));
          for (auto& part : index) e->children.push_back(part ? std::move(part) : make(EK::None_, line));
          node = std::move(e);
        }
      } else if (at_op("(")) {
        const int line = next().line;
        auto e = make(EK::Call, line);
        e->children.push_back(std::move(node));
        parse_call_arguments(*e);
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filters_and_tests(ExprPtr node) {
    Chain chain(*this);
    while (true) {
      if (at_op("|") || at_name("is")) chain.link();
      if (at_op("|")) {
        const int line = next().line;
        auto e = make(EK::Filter, line);
        e->name = expect_name();
        e->children.push_back(std::move(node));
        if (accept_op("(")) parse_call_arguments(*e);
        node = std::move(e);
      } else if (at_name("is")) {
        const int line = next().line;
        auto e = make(EK::Test, line);
        e->negated = accept_name("not");
        e->name = expect_name();
        e->children.push_back(std::move(node));
        if (accept_op("(")) {
          parse_call_arguments(*e);
        } else if (peek().kind == TK::String || peek().kind == TK::Int || peek().kind == TK::Float ||
                   (peek().kind == TK::Name && !at_name("and") && !at_name("or") && !at_name("else") &&
                    !at_name("if") && !at_name("is") && !at_name("in") && !at_name("not"))) {
          e->children.push_back(parse_postfix(parse_primary()));
        }
        node = std::move(e);
      } else if (at_op("(")) {
        node = parse_postfix(std::move(node));
      } else {
        return node;
      }
    }
  }

  // The parser recurses per nested block and sub-expression, and every
  // chained operator (a + b + c, x[0][0], s|trim|trim) adds a level to the
  // tree, which the renderer and the tree's destructor walk recursively.
  // Chat templates nest a few levels, so one bound far above that, charged
  // for both, keeps a hostile template from exhausting the stack.
  static constexpr int kMaxNesting = 256;
  void enter() {
    if (++nesting_ > kMaxNesting)
      fail("blocks or expressions nested deeper than " + std::to_string(kMaxNesting) + " levels");
  }
  struct Nesting {
    explicit Nesting(Parser& parser) : parser_(parser) { parser_.enter(); }
    ~Nesting() { --parser_.nesting_; }
    Parser& parser_;
  };
  // The levels a chain of operators has added so far; released when the
  // chain's subtree is complete.
  struct Chain {
    explicit Chain(Parser& parser) : parser_(parser) {}
    void link() {
      ++links_;
      parser_.enter();
    }
    ~Chain() { parser_.nesting_ -= links_; }
    Parser& parser_;
    int links_ = 0;
  };
  int nesting_ = 0;
  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int loop_depth_ = 0;  // for-loop bodies around the tag being parsed (break and continue need one)
};

}  // namespace

Template parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace meshrun::jinja
