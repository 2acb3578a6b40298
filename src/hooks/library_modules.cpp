#include "library_modules.hpp"

#include <lua.hpp>
#include <string>

#include "embedded_lua.hpp"

namespace meshrun::hooks_detail {
namespace {

const EmbeddedLua* find_module(std::string_view name) {
  for (const EmbeddedLua& module : library_modules()) {
    if (module.module == name) return &module;
  }
  return nullptr;
}

void load_module(lua_State* state, const EmbeddedLua& module) {
  int status = 0;
  {
    // Kept in its own scope: nothing may raise while it is alive.
    // "=" shows the origin as it is: "lua/meshrun/json.lua:12: ...".
    const std::string chunk_name = "=" + std::string(module.origin);
    status = luaL_loadbuffer(state, module.source.data(), module.source.size(), chunk_name.c_str());
  }
  if (status != 0) lua_error(state);
}

// package.preload loader: loader(name) runs the module with the globals.
// Upvalue 1: the module's index in library_modules().
int preload_loader(lua_State* state) {
  const auto index = static_cast<std::size_t>(lua_tointeger(state, lua_upvalueindex(1)));
  lua_settop(state, 1);
  load_module(state, library_modules()[index]);
  lua_pushvalue(state, 1);
  lua_call(state, 1, 1);
  return 1;
}

}  // namespace

void preload_library_modules(lua_State* state) {
  lua_getfield(state, LUA_REGISTRYINDEX, "_LOADED");
  lua_getfield(state, -1, "package");
  lua_getfield(state, -1, "preload");
  const auto modules = library_modules();
  for (std::size_t index = 0; index < modules.size(); ++index) {
    lua_pushlstring(state, modules[index].module.data(), modules[index].module.size());
    lua_pushinteger(state, static_cast<lua_Integer>(index));
    lua_pushcclosure(state, preload_loader, 1);
    lua_rawset(state, -3);
  }
  lua_pop(state, 3);
}

bool push_library_module(lua_State* state, std::string_view name, int environment_index) {
  const EmbeddedLua* module = find_module(name);
  if (module == nullptr) return false;
  if (environment_index < 0 && environment_index > LUA_REGISTRYINDEX) {
    environment_index = lua_gettop(state) + environment_index + 1;
  }
  load_module(state, *module);
  lua_pushvalue(state, environment_index);
  lua_setfenv(state, -2);
  return true;
}

}  // namespace meshrun::hooks_detail
