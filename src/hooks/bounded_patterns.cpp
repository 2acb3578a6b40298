#include "bounded_patterns.hpp"

#include <cctype>
#include <cstddef>
#include <cstring>
#include <lua.hpp>

#include "instruction_limit.hpp"

namespace meshrun::hooks_detail {
namespace {

constexpr char kEscape = '%';
constexpr int kMaxCaptures = 32;      // LUA_MAXCAPTURES
constexpr int kMaxDepth = 200;        // LuaJIT's bound before "pattern too complex"
constexpr long long kChargeEvery = 4096;  // steps gathered before charging the limits
constexpr std::ptrdiff_t kUnfinished = -1;
constexpr std::ptrdiff_t kPosition = -2;
// What makes find() treat its pattern as a pattern rather than plain text.
constexpr const char* kSpecials = "^$*+?.([%-";

bool is_class_byte(int c, int cls) {
  bool result;
  switch (cls | 0x20) {  // lower case
    case 'a': result = std::isalpha(c); break;
    case 'c': result = std::iscntrl(c); break;
    case 'd': result = std::isdigit(c); break;
    case 'g': result = std::isgraph(c); break;
    case 'l': result = std::islower(c); break;
    case 'p': result = std::ispunct(c); break;
    case 's': result = std::isspace(c); break;
    case 'u': result = std::isupper(c); break;
    case 'w': result = std::isalnum(c); break;
    case 'x': result = std::isxdigit(c); break;
    case 'z': result = c == 0; break;
    default: return cls == c;  // an escaped literal: %. %% %[
  }
  // An upper-case class letter is the complement.
  return (cls >= 'A' && cls <= 'Z') ? !result : result;
}

// One match attempt over one subject: the capture table, the recursion
// depth and the steps not yet charged. Every failure path raises through
// lua_error, so the struct holds nothing that needs unwinding.
class Matcher {
 public:
  Matcher(lua_State* state, const char* subject, std::size_t length)
      : state_(state), subject_(subject), end_(subject + length) {}

  void reset() {
    level_ = 0;
    depth_ = 0;
  }

  // Charges what is left, so that a call ending below the batch size still counts.
  void settle() {
    if (pending_ > 0) charge_instructions(state_, pending_, 1);
    pending_ = 0;
  }

  const char* match(const char* s, const char* p) {
    if (++depth_ > kMaxDepth) luaL_error(state_, "pattern too complex");
    const char* result = match_here(s, p);
    --depth_;
    return result;
  }

  int level() const { return level_; }

  // Pushes capture i (the whole match [s, e) when there are none).
  void push_capture(int i, const char* s, const char* e) {
    if (i >= level_) {
      if (i != 0) luaL_error(state_, "invalid capture index");
      lua_pushlstring(state_, s, static_cast<std::size_t>(e - s));
      return;
    }
    const std::ptrdiff_t length = captures_[i].length;
    if (length == kUnfinished) luaL_error(state_, "unfinished capture");
    if (length == kPosition) {
      lua_pushinteger(state_, static_cast<lua_Integer>(captures_[i].start - subject_ + 1));
    } else {
      lua_pushlstring(state_, captures_[i].start, static_cast<std::size_t>(length));
    }
  }

  // Pushes every capture (the whole match when there are none, and `s` is
  // not null); returns how many.
  int push_captures(const char* s, const char* e) {
    const int count = (level_ == 0 && s != nullptr) ? 1 : level_;
    luaL_checkstack(state_, count, "too many captures");
    for (int i = 0; i < count; ++i) push_capture(i, s, e);
    return count;
  }

  void step(long long steps = 1) {
    pending_ += steps;
    if (pending_ >= kChargeEvery) settle();
  }

  const char* subject() const { return subject_; }
  const char* end() const { return end_; }

 private:
  struct Capture {
    const char* start;
    std::ptrdiff_t length;
  };

  // The end of the single-character class that starts at p.
  const char* class_end(const char* p) {
    if (*p == '\0') return p;  // match_here never asks at the end; kept total
    const char c = *p++;
    if (c == kEscape) {
      if (*p == '\0') luaL_error(state_, "malformed pattern (ends with '%%')");
      return p + 1;
    }
    if (c == '[') {
      if (*p == '^') ++p;
      do {  // the first ']' of a set is a member, not its end
        if (*p == '\0') luaL_error(state_, "malformed pattern (missing ']')");
        if (*(p++) == kEscape && *p != '\0') ++p;
      } while (*p != ']');
      return p + 1;
    }
    return p;
  }

  // Whether byte c is in the set [p, last] where p is '[' and last its ']'.
  static bool in_set(int c, const char* p, const char* last) {
    bool member = true;
    if (*(p + 1) == '^') {
      member = false;
      ++p;
    }
    while (++p < last) {
      if (*p == kEscape) {
        ++p;
        if (is_class_byte(c, static_cast<unsigned char>(*p))) return member;
      } else if (*(p + 1) == '-' && p + 2 < last) {
        p += 2;
        if (static_cast<unsigned char>(*(p - 2)) <= c && c <= static_cast<unsigned char>(*p)) {
          return member;
        }
      } else if (static_cast<unsigned char>(*p) == c) {
        return member;
      }
    }
    return !member;
  }

  static bool single_match(int c, const char* p, const char* ep) {
    switch (*p) {
      case '.': return true;
      case kEscape: return is_class_byte(c, static_cast<unsigned char>(*(p + 1)));
      case '[': return in_set(c, p, ep - 1);
      default: return static_cast<unsigned char>(*p) == c;
    }
  }

  const char* match_balance(const char* s, const char* p) {
    if (*p == '\0' || *(p + 1) == '\0') luaL_error(state_, "unbalanced pattern");
    if (s >= end_ || *s != *p) return nullptr;
    const char open = *p;
    const char close = *(p + 1);
    int depth = 1;
    while (++s < end_) {
      step();
      if (*s == close) {
        if (--depth == 0) return s + 1;
      } else if (*s == open) {
        ++depth;
      }
    }
    return nullptr;
  }

  const char* max_expand(const char* s, const char* p, const char* ep) {
    std::ptrdiff_t count = 0;
    while (s + count < end_ && single_match(static_cast<unsigned char>(s[count]), p, ep)) {
      ++count;
      step();
    }
    // Longest first, giving back one byte at a time.
    while (count >= 0) {
      if (const char* result = match(s + count, ep + 1)) return result;
      --count;
    }
    return nullptr;
  }

  const char* min_expand(const char* s, const char* p, const char* ep) {
    for (;;) {
      if (const char* result = match(s, ep + 1)) return result;
      if (s < end_ && single_match(static_cast<unsigned char>(*s), p, ep)) {
        ++s;
      } else {
        return nullptr;
      }
    }
  }

  int capture_to_close() {
    for (int level = level_ - 1; level >= 0; --level) {
      if (captures_[level].length == kUnfinished) return level;
    }
    luaL_error(state_, "invalid pattern capture");
    return 0;
  }

  const char* start_capture(const char* s, const char* p, std::ptrdiff_t what) {
    if (level_ >= kMaxCaptures) luaL_error(state_, "too many captures");
    captures_[level_] = {s, what};
    ++level_;
    const char* result = match(s, p);
    if (result == nullptr) --level_;
    return result;
  }

  const char* end_capture(const char* s, const char* p) {
    const int level = capture_to_close();
    captures_[level].length = s - captures_[level].start;
    const char* result = match(s, p);
    if (result == nullptr) captures_[level].length = kUnfinished;
    return result;
  }

  const char* match_back_reference(const char* s, int digit) {
    const int index = digit - '1';
    if (index < 0 || index >= level_ || captures_[index].length == kUnfinished) {
      luaL_error(state_, "invalid capture index");
    }
    const auto length = static_cast<std::size_t>(captures_[index].length);
    step(static_cast<long long>(length / 16));
    if (static_cast<std::size_t>(end_ - s) >= length &&
        std::memcmp(captures_[index].start, s, length) == 0) {
      return s + length;
    }
    return nullptr;
  }

  // Lua's matcher: tail positions loop instead of recursing.
  const char* match_here(const char* s, const char* p) {
    for (;;) {
      step();
      switch (*p) {
        case '(':
          if (*(p + 1) == ')') return start_capture(s, p + 2, kPosition);
          return start_capture(s, p + 1, kUnfinished);
        case ')':
          return end_capture(s, p + 1);
        case '\0':
          return s;
        case '$':
          if (*(p + 1) == '\0') return s == end_ ? s : nullptr;
          break;
        case kEscape:
          if (*(p + 1) == 'b') {
            s = match_balance(s, p + 2);
            if (s == nullptr) return nullptr;
            p += 4;
            continue;
          }
          if (*(p + 1) == 'f') {
            p += 2;
            if (*p != '[') luaL_error(state_, "missing '[' after '%%f' in pattern");
            const char* ep = class_end(p);
            const int previous = s == subject_ ? 0 : static_cast<unsigned char>(*(s - 1));
            const int current = s < end_ ? static_cast<unsigned char>(*s) : 0;
            if (in_set(previous, p, ep - 1) || !in_set(current, p, ep - 1)) return nullptr;
            p = ep;
            continue;
          }
          if (*(p + 1) >= '0' && *(p + 1) <= '9') {
            s = match_back_reference(s, static_cast<unsigned char>(*(p + 1)));
            if (s == nullptr) return nullptr;
            p += 2;
            continue;
          }
          break;
        default:
          break;
      }
      // A single-character class, perhaps quantified.
      const char* ep = class_end(p);
      const bool matched = s < end_ && single_match(static_cast<unsigned char>(*s), p, ep);
      switch (*ep) {
        case '?':
          if (matched) {
            if (const char* result = match(s + 1, ep + 1)) return result;
          }
          p = ep + 1;
          continue;
        case '*':
          return max_expand(s, p, ep);
        case '+':
          return matched ? max_expand(s + 1, p, ep) : nullptr;
        case '-':
          return min_expand(s, p, ep);
        default:
          if (!matched) return nullptr;
          ++s;
          p = ep;
          continue;
      }
    }
  }

  lua_State* state_;
  const char* subject_;
  const char* end_;
  int level_ = 0;
  int depth_ = 0;
  long long pending_ = 0;
  Capture captures_[kMaxCaptures] = {};
};

// A plain search, one step per candidate position and per 16 bytes compared.
const char* find_plain(Matcher& matcher, const char* s, std::size_t length, const char* needle,
                       std::size_t needle_length) {
  if (needle_length == 0) return s;
  if (needle_length > length) return nullptr;
  const char* last = s + (length - needle_length);
  for (const char* at = s; at <= last; ++at) {
    at = static_cast<const char*>(std::memchr(at, needle[0], static_cast<std::size_t>(last - at) + 1));
    if (at == nullptr) return nullptr;
    matcher.step(1 + static_cast<long long>(needle_length / 16));
    if (std::memcmp(at + 1, needle + 1, needle_length - 1) == 0) return at;
  }
  return nullptr;
}

// Lua 5.1's init: 1-based, negative from the end, clamped to [0, length].
std::size_t start_offset(lua_State* state, int index, std::size_t length) {
  lua_Integer init = luaL_optinteger(state, index, 1);
  if (init < 0) init += static_cast<lua_Integer>(length) + 1;
  std::ptrdiff_t offset = init < 0 ? -1 : static_cast<std::ptrdiff_t>(init) - 1;
  if (offset < 0) offset = 0;
  if (static_cast<std::size_t>(offset) > length) offset = static_cast<std::ptrdiff_t>(length);
  return static_cast<std::size_t>(offset);
}

int find_or_match(lua_State* state, bool find) {
  std::size_t length = 0;
  std::size_t pattern_length = 0;
  const char* subject = luaL_checklstring(state, 1, &length);
  const char* pattern = luaL_checklstring(state, 2, &pattern_length);
  const std::size_t offset = start_offset(state, 3, length);
  Matcher matcher(state, subject, length);
  if (find && (lua_toboolean(state, 4) || std::strpbrk(pattern, kSpecials) == nullptr)) {
    const char* found = find_plain(matcher, subject + offset, length - offset, pattern, pattern_length);
    matcher.settle();
    if (found != nullptr) {
      lua_pushinteger(state, static_cast<lua_Integer>(found - subject + 1));
      lua_pushinteger(state, static_cast<lua_Integer>(found - subject + pattern_length));
      return 2;
    }
    lua_pushnil(state);
    return 1;
  }
  const bool anchored = *pattern == '^';
  if (anchored) ++pattern;
  const char* s = subject + offset;
  do {
    matcher.reset();
    if (const char* end = matcher.match(s, pattern)) {
      matcher.settle();
      if (find) {
        lua_pushinteger(state, static_cast<lua_Integer>(s - subject + 1));
        lua_pushinteger(state, static_cast<lua_Integer>(end - subject));
        return matcher.push_captures(nullptr, nullptr) + 2;
      }
      return matcher.push_captures(s, end);
    }
  } while (s++ < matcher.end() && !anchored);
  matcher.settle();
  lua_pushnil(state);
  return 1;
}

int bounded_find(lua_State* state) { return find_or_match(state, true); }
int bounded_match(lua_State* state) { return find_or_match(state, false); }

// The iterator of gmatch: upvalues subject, pattern and the next offset.
int gmatch_step(lua_State* state) {
  std::size_t length = 0;
  const char* subject = lua_tolstring(state, lua_upvalueindex(1), &length);
  const char* pattern = lua_tostring(state, lua_upvalueindex(2));
  auto offset = static_cast<std::size_t>(lua_tointeger(state, lua_upvalueindex(3)));
  Matcher matcher(state, subject, length);
  for (const char* s = subject + offset; s <= matcher.end(); ++s) {
    matcher.reset();
    if (const char* end = matcher.match(s, pattern)) {
      matcher.settle();
      std::size_t next = static_cast<std::size_t>(end - subject);
      if (end == s) ++next;  // an empty match moves on by one
      lua_pushinteger(state, static_cast<lua_Integer>(next));
      lua_replace(state, lua_upvalueindex(3));
      return matcher.push_captures(s, end);
    }
  }
  matcher.settle();
  // Past the end, so that a further call finds nothing at once.
  lua_pushinteger(state, static_cast<lua_Integer>(length + 1));
  lua_replace(state, lua_upvalueindex(3));
  return 0;
}

int bounded_gmatch(lua_State* state) {
  luaL_checkstring(state, 1);
  luaL_checkstring(state, 2);
  lua_settop(state, 2);
  lua_pushinteger(state, 0);
  lua_pushcclosure(state, gmatch_step, 3);
  return 1;
}

// Appends the replacement string (argument 3) for the match [s, e).
void add_replacement_string(Matcher& matcher, lua_State* state, luaL_Buffer* buffer,
                            const char* s, const char* e) {
  std::size_t length = 0;
  const char* replacement = lua_tolstring(state, 3, &length);
  matcher.step(static_cast<long long>(length / 16));
  for (std::size_t i = 0; i < length; ++i) {
    if (replacement[i] != kEscape) {
      luaL_addchar(buffer, replacement[i]);
      continue;
    }
    ++i;  // a '%' at the very end adds the string's terminating NUL, as LuaJIT does
    const char c = replacement[i];
    if (c < '0' || c > '9') {
      luaL_addchar(buffer, c);
    } else if (c == '0') {
      luaL_addlstring(buffer, s, static_cast<std::size_t>(e - s));
    } else {
      matcher.push_capture(c - '1', s, e);
      luaL_addvalue(buffer);
    }
  }
}

void add_replacement(Matcher& matcher, lua_State* state, luaL_Buffer* buffer, const char* s,
                     const char* e) {
  switch (lua_type(state, 3)) {
    case LUA_TNUMBER:
    case LUA_TSTRING:
      add_replacement_string(matcher, state, buffer, s, e);
      return;
    case LUA_TFUNCTION: {
      const NestedCallGuard nested(state, "string.gsub");
      lua_pushvalue(state, 3);
      const int count = matcher.push_captures(s, e);
      lua_call(state, count, 1);
      break;
    }
    default: {  // a table, whose __index may be a function
      const NestedCallGuard nested(state, "string.gsub");
      matcher.push_capture(0, s, e);
      lua_gettable(state, 3);
      break;
    }
  }
  if (!lua_toboolean(state, -1)) {
    lua_pop(state, 1);
    lua_pushlstring(state, s, static_cast<std::size_t>(e - s));  // keeps the original text
  } else if (!lua_isstring(state, -1)) {
    luaL_error(state, "invalid replacement value (a %s)", luaL_typename(state, -1));
  }
  luaL_addvalue(buffer);
}

int bounded_gsub(lua_State* state) {
  std::size_t length = 0;
  const char* subject = luaL_checklstring(state, 1, &length);
  const char* pattern = luaL_checkstring(state, 2);
  const int replacement_type = lua_type(state, 3);
  const lua_Integer limit = luaL_optinteger(state, 4, static_cast<lua_Integer>(length) + 1);
  if (replacement_type != LUA_TNUMBER && replacement_type != LUA_TSTRING &&
      replacement_type != LUA_TFUNCTION && replacement_type != LUA_TTABLE) {
    luaL_argerror(state, 3, "string/function/table expected");
  }
  const bool anchored = *pattern == '^';
  if (anchored) ++pattern;
  Matcher matcher(state, subject, length);
  // On the Lua heap, not the C stack: a replacement function may call gsub
  // again, and every level would hold its own LUAL_BUFFERSIZE bytes.
  auto& buffer = *static_cast<luaL_Buffer*>(lua_newuserdata(state, sizeof(luaL_Buffer)));
  luaL_buffinit(state, &buffer);
  const char* s = subject;
  lua_Integer replaced = 0;
  while (replaced < limit) {
    matcher.reset();
    const char* end = matcher.match(s, pattern);
    if (end != nullptr) {
      ++replaced;
      add_replacement(matcher, state, &buffer, s, end);
    }
    if (end != nullptr && end > s) {
      s = end;
    } else if (s < matcher.end()) {
      luaL_addchar(&buffer, *s++);
    } else {
      break;
    }
    if (anchored) break;
  }
  matcher.step(static_cast<long long>((matcher.end() - s) / 16));
  matcher.settle();
  luaL_addlstring(&buffer, s, static_cast<std::size_t>(matcher.end() - s));
  luaL_pushresult(&buffer);
  lua_pushinteger(state, static_cast<lua_Integer>(replaced));
  return 2;
}

}  // namespace

void add_bounded_patterns(lua_State* state, int string_index) {
  lua_pushcfunction(state, bounded_find);
  lua_setfield(state, string_index, "find");
  lua_pushcfunction(state, bounded_match);
  lua_setfield(state, string_index, "match");
  lua_pushcfunction(state, bounded_gmatch);
  lua_setfield(state, string_index, "gmatch");
  lua_pushcfunction(state, bounded_gsub);
  lua_setfield(state, string_index, "gsub");
}

}  // namespace meshrun::hooks_detail
