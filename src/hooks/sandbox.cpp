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

  lua_pushnil(state);
  while (lua_next(state, libraries) != 0) {
    lua_pushvalue(state, -2);
    lua_insert(state, -2);
    lua_rawset(state, environment);
  }

  add_chunk_loaders(state, environment, folder, libraries);

  lua_pushliteral(state, "");
  lua_getmetatable(state, -1);
  lua_getfield(state, libraries, "string");
  lua_setfield(state, -2, "__index");
  lua_pop(state, 2);

  lua_settop(state, environment);
}

}  // namespace meshrun::hooks_detail
