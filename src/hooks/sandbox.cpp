#include "sandbox.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <string_view>

#include "bounded_patterns.hpp"
#include "instruction_limit.hpp"
#include "sandbox_internal.hpp"

namespace meshrun::hooks_detail {
namespace {

constexpr std::array safe_global_names = {
    "assert", "error",    "ipairs",       "next",         "pairs",  "pcall",    "xpcall",
    "select", "tonumber", "tostring",     "type",         "unpack", "rawequal", "rawget",
    "rawset", "rawlen",   "setmetatable", "getmetatable", "print",  "_VERSION",
};

constexpr std::array copied_library_names = {"string", "table", "math", "bit", "coroutine"};

constexpr std::array os_allowed = {"time", "clock", "date", "difftime"};
// open and lines are replaced by the confined versions of sandbox_io.cpp.
constexpr std::array io_allowed = {"open", "lines"};

bool contains(std::span<const char* const> names, const char* name) {
  return std::any_of(names.begin(), names.end(),
                     [name](const char* candidate) { return std::strcmp(candidate, name) == 0; });
}

// Pushes the library as the state loaded it; ffi is only preloaded until the
// first require.
void push_real_library(lua_State* state, const char* name) {
  lua_getfield(state, LUA_REGISTRYINDEX, "_LOADED");
  lua_getfield(state, -1, name);
  lua_remove(state, -2);
  if (!lua_isnil(state, -1)) return;
  lua_pop(state, 1);
  lua_getfield(state, LUA_GLOBALSINDEX, "require");
  lua_pushstring(state, name);
  lua_call(state, 1, 1);
}

void push_library_copy(lua_State* state, const char* name) {
  push_real_library(state, name);
  const int real = lua_gettop(state);
  lua_newtable(state);
  lua_pushnil(state);
  while (lua_next(state, real) != 0) {
    lua_pushvalue(state, -2);
    lua_insert(state, -2);
    lua_rawset(state, -4);
  }
  lua_remove(state, real);
}

// __index of a restricted library: upvalue 1 is the library name, upvalue 2
// the set of member names the sandbox withholds.
int refuse_withheld_member(lua_State* state) {
  if (lua_type(state, 2) == LUA_TSTRING) {
    lua_pushvalue(state, 2);
    lua_rawget(state, lua_upvalueindex(2));
    if (lua_toboolean(state, -1)) {
      lua_pushfstring(state, "%s.%s is not allowed", lua_tostring(state, lua_upvalueindex(1)),
                      lua_tostring(state, 2));
      return raise_sandbox_violation(state, lua_tostring(state, -1));
    }
  }
  return 0;
}

void push_restricted_library(lua_State* state, const char* name,
                             std::span<const char* const> allowed) {
  push_real_library(state, name);
  const int real = lua_gettop(state);
  lua_newtable(state);
  const int restricted = lua_gettop(state);
  lua_newtable(state);
  const int withheld = lua_gettop(state);
  lua_pushnil(state);
  while (lua_next(state, real) != 0) {
    lua_pop(state, 1);
    if (lua_type(state, -1) != LUA_TSTRING) continue;
    const char* member = lua_tostring(state, -1);
    lua_pushvalue(state, -1);
    if (contains(allowed, member)) {
      lua_rawget(state, real);
      lua_setfield(state, restricted, member);
    } else {
      lua_pushboolean(state, 1);
      lua_rawset(state, withheld);
    }
  }
  lua_newtable(state);
  lua_pushstring(state, name);
  lua_pushvalue(state, withheld);
  lua_pushcclosure(state, refuse_withheld_member, 2);
  lua_setfield(state, -2, "__index");
  lua_setmetatable(state, restricted);
  lua_pop(state, 1);  // withheld
  lua_remove(state, real);
}

// LuaJIT runs an error handler for an error raised by the count hook while
// hooks are still disabled, so a looping xpcall handler would never be
// stopped. Once the call is over its limits the script's handler is skipped
// and the limit's message passes through. Upvalue 1: the script's handler.
int limit_aware_handler(lua_State* state) {
  if (const CallLimits* limits = CallLimits::active(state);
      limits != nullptr && limits->exceeded()) {
    return 1;
  }
  const NestedCallGuard nested(state, "xpcall's message handler");
  lua_pushvalue(state, lua_upvalueindex(1));
  lua_insert(state, 1);
  lua_call(state, lua_gettop(state) - 1, 1);
  return 1;
}

int make_limit_aware_handler(lua_State* state) {
  lua_settop(state, 1);
  // Anything else is left for the real xpcall to refuse in its own words.
  if (lua_isfunction(state, 1)) lua_pushcclosure(state, limit_aware_handler, 1);
  return 1;
}

// A Lua function rather than a C one, so that coroutines may still yield
// inside xpcall (LuaJIT cannot yield across a C call).
constexpr std::string_view xpcall_wrapper_source =
    "local xpcall, limit_aware = ...\n"
    "return function(f, handler, ...) return xpcall(f, limit_aware(handler), ...) end\n";

void set_limit_aware_xpcall(lua_State* state, int environment) {
  if (luaL_loadbuffer(state, xpcall_wrapper_source.data(), xpcall_wrapper_source.size(),
                      "=[sandbox xpcall]") != 0) {
    lua_error(state);
  }
  lua_getfield(state, LUA_GLOBALSINDEX, "xpcall");
  lua_pushcfunction(state, make_limit_aware_handler);
  lua_call(state, 2, 1);
  lua_setfield(state, environment, "xpcall");
}

// Library functions that LuaJIT implements in C and that call back into Lua
// on a C frame of their own (resume and wrap run the coroutine from C, sort
// calls its comparator, format and print call __tostring). Each is replaced
// by a guarded_call closure so that recursion through them is bounded by
// NestedCallGuard instead of overflowing the C stack.
struct GuardedMember {
  const char* library;  // nullptr: a global
  const char* name;
  const char* shown;
};
constexpr std::array guarded_members = {
    GuardedMember{"coroutine", "resume", "coroutine.resume"},
    GuardedMember{"table", "sort", "table.sort"},
    GuardedMember{"string", "format", "string.format"},
    GuardedMember{nullptr, "print", "print"},
};

// Called from C, the real function cannot see its name or the script line
// (luaL_argerror says "bad argument #2 to '?'", unlocated); puts both back
// into such a message of its own, on top.
void restore_name_and_location(lua_State* state, const char* shown) {
  if (lua_type(state, -1) != LUA_TSTRING) return;
  const std::string_view message = lua_tostring(state, -1);
  if (!message.starts_with("bad argument #") && message != "invalid order function for sorting") {
    return;
  }
  luaL_where(state, 1);
  constexpr std::string_view unnamed = "to '?'";
  if (const std::size_t at = message.find(unnamed); at != std::string_view::npos) {
    lua_pushlstring(state, message.data(), at);
    lua_pushfstring(state, "to '%s'", shown);
    lua_pushstring(state, message.data() + at + unnamed.size());
    lua_concat(state, 3);
  } else {
    lua_pushvalue(state, -2);
  }
  lua_concat(state, 2);
  lua_remove(state, -2);
}

// Upvalue 1: the real function; upvalue 2: its name for the messages.
int guarded_call(lua_State* state) {
  const char* shown = lua_tostring(state, lua_upvalueindex(2));
  const NestedCallGuard nested(state, shown);
  lua_pushvalue(state, lua_upvalueindex(1));
  lua_insert(state, 1);
  if (lua_pcall(state, lua_gettop(state) - 1, LUA_MULTRET, 0) != 0) {
    restore_name_and_location(state, shown);
    return lua_error(state);
  }
  return lua_gettop(state);
}

// Replaces the function on top with a guarded_call closure around it.
void guard_function_on_top(lua_State* state, const char* shown) {
  lua_pushstring(state, shown);
  lua_pushcclosure(state, guarded_call, 2);
}

// coroutine.wrap(f): the function it returns resumes from C each call.
// Upvalue 1: the real coroutine.wrap.
int guarded_coroutine_wrap(lua_State* state) {
  lua_pushvalue(state, lua_upvalueindex(1));
  lua_insert(state, 1);
  lua_call(state, lua_gettop(state) - 1, 1);
  guard_function_on_top(state, "a coroutine.wrap function");
  return 1;
}

// table.insert(t, pos, value) with pos outside [1, #t + 1] is refused, as
// Lua 5.3 does: LuaJIT would shift elements one by one in C, where the
// instruction limit never runs (2^53 takes seconds per call). Upvalue 1:
// the real table.insert.
int bounded_table_insert(lua_State* state) {
  if (lua_gettop(state) == 3) {
    luaL_checktype(state, 1, LUA_TTABLE);
    const lua_Number position = luaL_checknumber(state, 2);
    const auto length = static_cast<lua_Number>(lua_objlen(state, 1));
    if (!(position >= 1 && position <= length + 1)) {
      return luaL_argerror(state, 2, "position out of bounds");
    }
  }
  lua_pushvalue(state, lua_upvalueindex(1));
  lua_insert(state, 1);
  lua_call(state, lua_gettop(state) - 1, 0);
  return 0;
}

// __newindex of the string metatable's stand-in.
int refuse_string_metatable_change(lua_State* state) {
  return raise_sandbox_violation(state, "the string metatable is read-only");
}

void guard_library_functions(lua_State* state, int environment, int libraries) {
  for (const GuardedMember& member : guarded_members) {
    const int owner = lua_gettop(state) + 1;
    if (member.library != nullptr) {
      lua_getfield(state, libraries, member.library);
    } else {
      lua_pushvalue(state, environment);
    }
    lua_getfield(state, owner, member.name);
    guard_function_on_top(state, member.shown);
    lua_setfield(state, owner, member.name);
    lua_settop(state, owner - 1);
  }
  lua_getfield(state, libraries, "coroutine");
  lua_getfield(state, -1, "wrap");
  lua_pushcclosure(state, guarded_coroutine_wrap, 1);
  lua_setfield(state, -2, "wrap");
  lua_pop(state, 1);

  lua_getfield(state, libraries, "table");
  lua_getfield(state, -1, "insert");
  lua_pushcclosure(state, bounded_table_insert, 1);
  lua_setfield(state, -2, "insert");
  lua_pop(state, 1);
}

// Points the string metatable's __index at the sandbox's string table and
// hides the metatable behind a read-only stand-in: the metatable is shared
// by every string of the state, trusted code included, so getmetatable("")
// must not let a script change it. The stand-in reads through to it, so
// getmetatable("").__index.upper still works.
void protect_string_metatable(lua_State* state, int libraries) {
  lua_pushliteral(state, "");
  lua_getmetatable(state, -1);
  const int metatable = lua_gettop(state);
  lua_getfield(state, libraries, "string");
  lua_setfield(state, metatable, "__index");

  lua_newtable(state);  // the stand-in
  lua_createtable(state, 0, 3);
  lua_pushvalue(state, metatable);
  lua_setfield(state, -2, "__index");
  lua_pushcfunction(state, refuse_string_metatable_change);
  lua_setfield(state, -2, "__newindex");
  lua_pushboolean(state, 0);
  lua_setfield(state, -2, "__metatable");
  lua_setmetatable(state, -2);
  lua_setfield(state, metatable, "__metatable");
  lua_pop(state, 2);
}

}  // namespace

int raise_sandbox_violation(lua_State* state, const char* what) {
  luaL_where(state, 1);
  lua_pushfstring(state, "sandbox: %s (set [hooks] sandbox = false to lift it)", what);
  lua_concat(state, 2);
  return lua_error(state);
}

void push_sandbox_environment(lua_State* state, const std::string& script_folder) {
  lua_newtable(state);
  const int environment = lua_gettop(state);
  lua_pushlstring(state, script_folder.data(), script_folder.size());
  const int folder = lua_gettop(state);
  // What require("name") returns for a library, whatever the script later
  // does to its globals.
  lua_newtable(state);
  const int libraries = lua_gettop(state);

  for (const char* name : safe_global_names) {
    lua_getfield(state, LUA_GLOBALSINDEX, name);
    lua_setfield(state, environment, name);  // nil for rawlen on LuaJIT without 5.2 compat
  }
  lua_pushvalue(state, environment);
  lua_setfield(state, environment, "_G");
  set_limit_aware_xpcall(state, environment);

  for (const char* name : copied_library_names) {
    push_library_copy(state, name);
    if (std::strcmp(name, "string") == 0) add_bounded_patterns(state, lua_gettop(state));
    lua_setfield(state, libraries, name);
  }
  push_restricted_library(state, "os", os_allowed);
  lua_setfield(state, libraries, "os");
  push_restricted_library(state, "io", io_allowed);
  add_confined_io(state, lua_gettop(state), folder);
  lua_setfield(state, libraries, "io");
  // No ffi at all: any of its constructors yields pointers (an array
  // decays to one, and pointer arithmetic reaches every address).

  guard_library_functions(state, environment, libraries);

  lua_pushnil(state);
  while (lua_next(state, libraries) != 0) {
    lua_pushvalue(state, -2);
    lua_insert(state, -2);
    lua_rawset(state, environment);
  }

  add_chunk_loaders(state, environment, folder, libraries);
  protect_string_metatable(state, libraries);

  lua_settop(state, environment);
}

}  // namespace meshrun::hooks_detail
