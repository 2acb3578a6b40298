#include "hook_call.hpp"

#include <lua.hpp>

#include "lua_message.hpp"
#include "protected_call.hpp"
#include "script_environment.hpp"

namespace meshrun::hooks_detail {
namespace {

struct BuildRequest {
  BuildFunction build;
  const void* context;
  int reference = LUA_NOREF;
};

int run_build(lua_State* state) {
  auto* request = static_cast<BuildRequest*>(lua_touserdata(state, 1));
  lua_settop(state, 0);
  request->build(state, request->context);
  request->reference = luaL_ref(state, LUA_REGISTRYINDEX);
  return 0;
}

std::string pop_string(lua_State* state) {
  size_t length = 0;
  const char* text = lua_tolstring(state, -1, &length);
  std::string message = text != nullptr ? std::string(text, length) : std::string("unknown error");
  lua_pop(state, 1);
  return message;
}

}  // namespace

StackRestorer::StackRestorer(lua_State* state) : state_(state), top_(lua_gettop(state)) {}

StackRestorer::~StackRestorer() { lua_settop(state_, top_); }

RegistryValue::~RegistryValue() { luaL_unref(state_, LUA_REGISTRYINDEX, reference_); }

void RegistryValue::push() const { lua_rawgeti(state_, LUA_REGISTRYINDEX, reference_); }

int build_protected(const HookScript& script, std::string_view hook_point, BuildFunction build,
                    const void* context) {
  BuildRequest request{build, context};
  lua_State* state = script.state();
  if (lua_cpcall(state, run_build, &request) != 0) {
    throw HookError(script.path(), 0, std::string(hook_point),
                    "cannot pass the arguments to Lua: " + pop_string(state), "");
  }
  return request.reference;
}

int push_hook_function(const HookScript& script, std::string_view name) {
  lua_State* state = script.state();
  if (!push_script_function(state, name)) {
    throw HookError(script.path(), 0, std::string(name),
                    "the script defines no function '" + std::string(name) + "'", "");
  }
  lua_Debug where{};
  lua_pushvalue(state, -1);
  lua_getinfo(state, ">S", &where);  // pops the copy
  const bool in_script = where.source != nullptr && where.source[0] == '@' &&
                         std::string_view(where.source + 1) == script.path();
  return in_script ? where.linedefined : 0;
}

void call_hook(const HookScript& script, std::string_view hook_point, int nargs) {
  std::string message;
  std::string traceback;
  if (protected_call(script.state(), nargs, 1, script.options(), message, traceback) != 0) {
    throw make_hook_error(script.path(), std::string(hook_point), message, std::move(traceback));
  }
}

void throw_bad_result(const HookScript& script, std::string_view hook_point, int line,
                      std::string message) {
  throw HookError(script.path(), line, std::string(hook_point), std::move(message), "");
}

int64_t count_entries(lua_State* state, int index) {
  const int table = index < 0 ? lua_gettop(state) + 1 + index : index;  // the key pushed below moves -1
  int64_t entries = 0;
  lua_pushnil(state);
  while (lua_next(state, table) != 0) {
    ++entries;
    lua_pop(state, 1);
  }
  return entries;
}

std::string describe_type(lua_State* state, int index) {
  const int type = lua_type(state, index);
  if (type == LUA_TNIL || type == LUA_TNONE) return "nil";
  const std::string name = lua_typename(state, type);
  // Every Lua type name (boolean, table, userdata, cdata, ...) reads well after "a".
  return "a " + name;
}

}  // namespace meshrun::hooks_detail
