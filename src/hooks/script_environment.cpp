#include "script_environment.hpp"

#include <algorithm>
#include <lua.hpp>

namespace meshrun::hooks_detail {
namespace {

constexpr const char* environment_key = "meshrun.hooks.environment";
constexpr const char* builtins_key = "meshrun.hooks.builtins";
constexpr const char* exports_key = "meshrun.hooks.exports";

void raw_get_field(lua_State* state, int table_index, std::string_view name) {
  lua_pushlstring(state, name.data(), name.size());
  lua_rawget(state, table_index < 0 ? table_index - 1 : table_index);
}

bool is_builtin(lua_State* state, std::string_view name, int value_index) {
  lua_getfield(state, LUA_REGISTRYINDEX, builtins_key);
  raw_get_field(state, -1, name);
  const bool builtin = lua_rawequal(state, -1, value_index);
  lua_pop(state, 2);
  return builtin;
}

// Appends the string keys of the table on top whose values are functions
// that `keep` accepts; pops the table.
template <typename Keep>
void collect_function_names(lua_State* state, std::vector<std::string>& names, Keep keep) {
  const int table = lua_gettop(state);
  if (!lua_istable(state, table)) {
    lua_pop(state, 1);
    return;
  }
  lua_pushnil(state);
  while (lua_next(state, table) != 0) {
    if (lua_type(state, -2) == LUA_TSTRING && lua_isfunction(state, -1)) {
      size_t length = 0;
      const char* key = lua_tolstring(state, -2, &length);
      std::string_view name(key, length);
      if (keep(name, lua_gettop(state))) names.emplace_back(name);
    }
    lua_pop(state, 1);
  }
  lua_pop(state, 1);
}

}  // namespace

void record_environment(lua_State* state) {
  const int environment = lua_gettop(state);
  lua_pushvalue(state, environment);
  lua_setfield(state, LUA_REGISTRYINDEX, environment_key);
  lua_newtable(state);
  lua_pushnil(state);
  while (lua_next(state, environment) != 0) {
    if (lua_isfunction(state, -1)) {
      lua_pushvalue(state, -2);
      lua_insert(state, -2);
      lua_rawset(state, -4);
    } else {
      lua_pop(state, 1);
    }
  }
  lua_setfield(state, LUA_REGISTRYINDEX, builtins_key);
}

void record_exports(lua_State* state) {
  if (lua_istable(state, -1)) {
    lua_setfield(state, LUA_REGISTRYINDEX, exports_key);
  } else {
    lua_pop(state, 1);
  }
}

void* registry_pointer(lua_State* state, const void* key) {
  lua_pushlightuserdata(state, const_cast<void*>(key));
  lua_rawget(state, LUA_REGISTRYINDEX);
  void* pointer = lua_touserdata(state, -1);
  lua_pop(state, 1);
  return pointer;
}

void push_environment(lua_State* state) { lua_getfield(state, LUA_REGISTRYINDEX, environment_key); }

bool push_script_function(lua_State* state, std::string_view name) {
  lua_getfield(state, LUA_REGISTRYINDEX, exports_key);
  if (lua_istable(state, -1)) {
    raw_get_field(state, -1, name);
    if (lua_isfunction(state, -1)) {
      lua_remove(state, -2);
      return true;
    }
    lua_pop(state, 1);
  }
  lua_pop(state, 1);

  push_environment(state);
  if (lua_istable(state, -1)) {
    raw_get_field(state, -1, name);
    if (lua_isfunction(state, -1) && !is_builtin(state, name, lua_gettop(state))) {
      lua_remove(state, -2);
      return true;
    }
    lua_pop(state, 1);
  }
  lua_pop(state, 1);
  return false;
}

std::vector<std::string> script_function_names(lua_State* state) {
  std::vector<std::string> names;
  lua_getfield(state, LUA_REGISTRYINDEX, exports_key);
  collect_function_names(state, names, [](std::string_view, int) { return true; });
  push_environment(state);
  collect_function_names(state, names, [state](std::string_view name, int value_index) {
    return !is_builtin(state, name, value_index);
  });
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace meshrun::hooks_detail
