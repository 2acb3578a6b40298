// Internal to the hooks subsystem: turning what Lua reports on failure (a
// message such as "path:12: attempt to call a nil value" plus a traceback)
// into a HookError that names the script line, keeping the message free of
// the location prefix. Lua shortens long chunk names to "...tail", so a
// location refers to the script when it names the path in either form.
#pragma once

#include <string>
#include <string_view>

#include "meshrun/hooks/hooks.hpp"

namespace meshrun::hooks_detail {

struct LocatedMessage {
  int line = 0;         // innermost line of the script named, 0 when none
  std::string message;  // the message with the script's location prefixes removed
};

// True when `shown_source` (the file part of a Lua location) is how Lua
// prints the chunk name "@script_path".
bool location_names_script(std::string_view shown_source, std::string_view script_path);

// Removes the leading "SCRIPT:LINE: " prefixes that refer to the script and
// keeps the innermost line; when the message has none, the line comes from
// the innermost traceback frame inside the script.
LocatedMessage locate_in_script(std::string_view lua_message, std::string_view traceback,
                                std::string_view script_path);

HookError make_hook_error(const std::string& script_path, std::string hook_point,
                          std::string_view lua_message, std::string traceback);

}  // namespace meshrun::hooks_detail
