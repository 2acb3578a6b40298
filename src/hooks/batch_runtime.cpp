#include "batch_runtime.hpp"

#include <lua.hpp>
#include <string>

#include "embedded_lua.hpp"

namespace meshrun::hooks_detail {
namespace {

// Its address is the registry key of the runtime's table.
const char runtime_key = 0;

}  // namespace

void install_batch_runtime(lua_State* state) {
  const EmbeddedLua& runtime = batch_runtime_sources().front();
  int status = 0;
  {
    // Kept in its own scope: nothing may raise while it is alive.
    const std::string chunk_name = "=" + std::string(runtime.origin);
    status =
        luaL_loadbuffer(state, runtime.source.data(), runtime.source.size(), chunk_name.c_str());
  }
  if (status != 0) lua_error(state);
  lua_call(state, 0, 1);
  lua_pushlightuserdata(state, const_cast<char*>(&runtime_key));
  lua_insert(state, -2);
  lua_rawset(state, LUA_REGISTRYINDEX);
}

bool is_batch_runtime_source(const char* source) {
  const std::string_view origin = batch_runtime_sources().front().origin;
  const std::string_view shown = source != nullptr ? source : "";
  return shown.size() == origin.size() + 1 && shown.front() == '=' && shown.substr(1) == origin;
}

void push_batch_runtime_function(lua_State* state, const char* name) {
  lua_pushlightuserdata(state, const_cast<char*>(&runtime_key));
  lua_rawget(state, LUA_REGISTRYINDEX);
  lua_getfield(state, -1, name);
  lua_remove(state, -2);
}

}  // namespace meshrun::hooks_detail
