#include "lua_message.hpp"

#include <charconv>
#include <lua.hpp>
#include <optional>

namespace meshrun::hooks_detail {
namespace {

struct Location {
  std::string_view source;
  int line = 0;
  std::size_t length = 0;  // of "SOURCE:LINE:" including the trailing colon
};

// Parses "SOURCE:LINE:" at the start of `text`. SOURCE may itself contain
// colons, so the first ":digits:" run ends it.
std::optional<Location> leading_location(std::string_view text) {
  for (std::size_t colon = text.find(':'); colon != std::string_view::npos;
       colon = text.find(':', colon + 1)) {
    if (colon == 0) continue;
    std::size_t digits_end = colon + 1;
    while (digits_end < text.size() && text[digits_end] >= '0' && text[digits_end] <= '9') {
      ++digits_end;
    }
    if (digits_end == colon + 1 || digits_end >= text.size() || text[digits_end] != ':') continue;
    int line = 0;
    std::from_chars(text.data() + colon + 1, text.data() + digits_end, line);
    return Location{text.substr(0, colon), line, digits_end + 1};
  }
  return std::nullopt;
}

std::optional<int> innermost_traceback_line(std::string_view traceback,
                                            std::string_view script_path) {
  // luaL_traceback lists frames innermost first, one per line, each "\tSOURCE:LINE: in ...".
  std::size_t start = 0;
  while (start < traceback.size()) {
    std::size_t end = traceback.find('\n', start);
    if (end == std::string_view::npos) end = traceback.size();
    std::string_view frame = traceback.substr(start, end - start);
    while (!frame.empty() && (frame.front() == '\t' || frame.front() == ' ')) {
      frame.remove_prefix(1);
    }
    if (auto location = leading_location(frame);
        location && location_names_script(location->source, script_path)) {
      return location->line;
    }
    start = end + 1;
  }
  return std::nullopt;
}

}  // namespace

bool location_names_script(std::string_view shown_source, std::string_view script_path) {
  if (shown_source.empty() || script_path.empty()) return false;
  if (shown_source == script_path) return true;
  // LuaJIT keeps the last LUA_IDSIZE - 4 characters of a long "@" chunk name behind "...".
  constexpr std::string_view ellipsis = "...";
  if (shown_source.size() > ellipsis.size() && shown_source.starts_with(ellipsis)) {
    std::string_view tail = shown_source.substr(ellipsis.size());
    return script_path.size() >= LUA_IDSIZE - 1 && script_path.ends_with(tail);
  }
  return false;
}

LocatedMessage locate_in_script(std::string_view lua_message, std::string_view traceback,
                                std::string_view script_path) {
  LocatedMessage located;
  std::string_view rest = lua_message;
  // error() rethrowing a caught message stacks prefixes ("a:9: a:3: boom"); the
  // last one of the script is where the failure started.
  while (auto location = leading_location(rest)) {
    if (!location_names_script(location->source, script_path)) break;
    located.line = location->line;
    rest.remove_prefix(location->length);
    if (rest.starts_with(' ')) rest.remove_prefix(1);
  }
  if (located.line == 0) {
    located.line = innermost_traceback_line(traceback, script_path).value_or(0);
  }
  located.message = std::string(rest);
  return located;
}

HookError make_hook_error(const std::string& script_path, std::string hook_point,
                          std::string_view lua_message, std::string traceback) {
  LocatedMessage located = locate_in_script(lua_message, traceback, script_path);
  return HookError(script_path, located.line, std::move(hook_point), std::move(located.message),
                   std::move(traceback));
}

}  // namespace meshrun::hooks_detail
