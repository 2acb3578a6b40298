// The sandbox's io: io.open and io.lines, each confined to the script's
// folder and otherwise the real functions (same modes, same results).

#include <string>

#include "folder_confinement.hpp"
#include "sandbox_internal.hpp"

namespace meshrun::hooks_detail {
namespace {

// Upvalue 1: the script folder; upvalue 2: the real function.
int call_with_confined_path(lua_State* state, const char* operation) {
  const int argument_count = lua_gettop(state);
  size_t length = 0;
  const char* requested = luaL_checklstring(state, 1, &length);
  lua_pushfstring(state, "%s('%s')", operation, requested);
  push_confined_path(state, lua_upvalueindex(1), {requested, length}, lua_tostring(state, -1));
  const int resolved = lua_gettop(state);
  const int base = resolved;
  lua_pushvalue(state, lua_upvalueindex(2));
  lua_pushvalue(state, resolved);
  for (int argument = 2; argument <= argument_count; ++argument) lua_pushvalue(state, argument);
  lua_call(state, argument_count, LUA_MULTRET);
  return lua_gettop(state) - base;
}

int confined_io_open(lua_State* state) { return call_with_confined_path(state, "io.open"); }

int confined_io_lines(lua_State* state) {
  if (lua_isnoneornil(state, 1)) {
    return raise_sandbox_violation(
        state, "io.lines() without a file name (standard input) is not allowed");
  }
  return call_with_confined_path(state, "io.lines");
}

void set_confined(lua_State* state, int io_index, int folder_index, const char* name,
                  lua_CFunction confined) {
  lua_pushvalue(state, folder_index);
  lua_getfield(state, LUA_REGISTRYINDEX, "_LOADED");
  lua_getfield(state, -1, "io");
  lua_getfield(state, -1, name);
  lua_replace(state, -3);
  lua_pop(state, 1);
  lua_pushcclosure(state, confined, 2);
  lua_setfield(state, io_index, name);
}

}  // namespace

const char* push_confined_path(lua_State* state, int folder_index, std::string_view requested,
                               const char* what) {
  bool confined = false;
  {
    // Kept in its own scope: nothing below may raise while these are alive.
    std::string refusal;
    std::optional<std::filesystem::path> path =
        confine_to_folder(lua_tostring(state, folder_index), requested, refusal);
    confined = path.has_value();
    if (confined) {
      lua_pushstring(state, path->c_str());
    } else {
      lua_pushfstring(state, "%s %s", what, refusal.c_str());
    }
  }
  if (!confined) raise_sandbox_violation(state, lua_tostring(state, -1));
  return lua_tostring(state, -1);
}

void add_confined_io(lua_State* state, int io_index, int folder_index) {
  set_confined(state, io_index, folder_index, "open", confined_io_open);
  set_confined(state, io_index, folder_index, "lines", confined_io_lines);
}

}  // namespace meshrun::hooks_detail
