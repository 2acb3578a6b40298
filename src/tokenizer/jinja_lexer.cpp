// Splits a template into text and tag tokens with Jinja's whitespace rules
// as Hugging Face configures them: trim_blocks (the newline after a block
// or comment tag is dropped), lstrip_blocks (spaces and tabs before a block
// or comment tag on its own line are dropped), `-` strips all whitespace on
// that side, `+` turns lstrip/trim off, one trailing newline is dropped.
#include <cctype>
#include <cstring>

#include "jinja.hpp"

namespace meshrun::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      std::string data = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        emit_text(data);
        pos_ = tag;
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        while (!data.empty() && is_space(data.back())) data.pop_back();
      } else if (modifier != '+' && kind != '{') {
        const size_t line_begin = data.rfind('\n') == std::string::npos ? 0 : data.rfind('\n') + 1;
        if (line_begin > 0 || line_starting) {
          bool blank = true;
          for (size_t i = line_begin; i < data.size(); ++i) blank = blank && (data[i] == ' ' || data[i] == '\t');
          if (blank) data.resize(line_begin);
        }
      }
      emit_text(data);
      line_ += count_lines(pos_, tag);
      pos_ = tag + 2 + (modifier == '-' || modifier == '+' ? 1 : 0);
      if (kind == '#') lex_comment();
      else if (kind == '{') lex_tag(Token::Kind::VarBegin, Token::Kind::VarEnd, "}}");
      else if (!lex_raw()) lex_tag(Token::Kind::BlockBegin, Token::Kind::BlockEnd, "%}");
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back({Token::Kind::End, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  int count_lines(size_t from, size_t to) const {
    int n = 0;
    for (size_t i = from; i < to && i < src_.size(); ++i) n += src_[i] == '\n';
    return n;
  }

  void emit_text(const std::string& data) {
    if (!data.empty()) tokens_.push_back({Token::Kind::Text, data, line_});
  }

  [[noreturn]] void fail(const std::string& message) const {
    throw RenderError{"line " + std::to_string(line_) + ": " + message};
  }

  // After a block or comment end: `-` strips all whitespace, otherwise
  // trim_blocks drops one newline unless the end was written `+%}`.
  void after_block_end(bool strip, bool keep) {
    if (strip) {
      while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
    } else if (!keep && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
  }

  void lex_comment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail("unterminated comment");
    const bool strip = end > pos_ && src_[end - 1] == '-';
    line_ += count_lines(pos_, end);
    pos_ = end + 2;
    after_block_end(strip, false);
  }

  // {% raw %}...{% endraw %}: the text in between is taken as it is.
  bool lex_raw() {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    const bool strip_after = src_.compare(p, 3, "-%}") == 0;
    if (!strip_after && src_.compare(p, 2, "%}") != 0) return false;
    pos_ = p + (strip_after ? 3 : 2);
    after_block_end(strip_after, false);
    for (size_t q = pos_; (q = src_.find("{%", q)) != std::string::npos; q += 2) {
      size_t r = q + 2;
      const bool strip_before = r < src_.size() && src_[r] == '-';
      if (strip_before || (r < src_.size() && src_[r] == '+')) ++r;
      while (r < src_.size() && is_space(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && is_space(src_[r])) ++r;
      const bool strip_end = src_.compare(r, 3, "-%}") == 0;
      if (!strip_end && src_.compare(r, 2, "%}") != 0) continue;
      std::string data = src_.substr(pos_, q - pos_);
      if (strip_before)
        while (!data.empty() && is_space(data.back())) data.pop_back();
      emit_text(data);
      line_ += count_lines(pos_, r);
      pos_ = r + (strip_end ? 3 : 2);
      after_block_end(strip_end, false);
      return true;
    }
    fail("unterminated raw block");
  }

  void lex_tag(Token::Kind begin, Token::Kind end_kind, const char* end) {
    tokens_.push_back({begin, "", line_});
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size()) fail(std::string("missing ") + end);
      const char c = src_[pos_];
      if (depth == 0) {
        const bool minus = c == '-' && src_.compare(pos_ + 1, 2, end) == 0;
        const bool plus = c == '+' && end_kind == Token::Kind::BlockEnd && src_.compare(pos_ + 1, 2, end) == 0;
        if (minus || plus || src_.compare(pos_, 2, end) == 0) {
          pos_ += (minus || plus) ? 3 : 2;
          tokens_.push_back({end_kind, "", line_});
          if (end_kind == Token::Kind::BlockEnd) after_block_end(minus, plus);
          else if (minus) after_block_end(true, false);
          return;
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t start = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        tokens_.push_back({Token::Kind::Name, src_.substr(start, pos_ - start), line_});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                           ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
        const char* op = nullptr;
        for (const char* candidate : kOps)
          if (src_.compare(pos_, std::strlen(candidate), candidate) == 0) {
            op = candidate;
            break;
          }
        if (!op) fail(std::string("unexpected character '") + c + "'");
        if (*op == '(' || *op == '[' || *op == '{') ++depth;
        if (*op == ')' || *op == ']' || *op == '}') --depth;
        tokens_.push_back({Token::Kind::Op, op, line_});
        pos_ += std::strlen(op);
      }
    }
  }

  void lex_number() {
    size_t start = pos_;
    while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        pos_ = p;
        while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
      }
    }
    std::string text = src_.substr(start, pos_ - start);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    tokens_.push_back({is_float ? Token::Kind::Float : Token::Kind::Int, text, line_});
  }

  void lex_string(char quote) {
    std::string out;
    ++pos_;
    while (true) {
      if (pos_ >= src_.size()) fail("unterminated string");
      char c = src_[pos_++];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= src_.size()) fail("unterminated string");
      char e = src_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': ++line_; break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + digits > src_.size()) fail("truncated \\" + std::string(1, e) + " escape");
          const std::string hex = src_.substr(pos_, digits);
          for (char h : hex)
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail("bad \\" + std::string(1, e) + " escape");
          pos_ += digits;
          const auto code_point = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
          // Python accepts these in a string, but no UTF-8 text can hold them.
          if (code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF))
            fail("\\" + std::string(1, e) + hex + " is not a Unicode scalar value (a surrogate or past U+10FFFF)");
          out += utf8(std::u32string(1, code_point));
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    tokens_.push_back({Token::Kind::String, out, line_});
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline = False
  return out;
}

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace meshrun::jinja
