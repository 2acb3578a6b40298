#include "protected_call.hpp"

#include <lua.hpp>

#include "instruction_limit.hpp"
#include "memory_budget.hpp"

namespace meshrun::hooks_detail {
namespace {

// Its address is the registry key where the message handler leaves the
// traceback, so the message itself stays as Lua produced it.
const char traceback_key = 0;

void push_traceback_slot_key(lua_State* state) {
  lua_pushlightuserdata(state, const_cast<char*>(&traceback_key));
}

int record_traceback(lua_State* state) {
  if (lua_type(state, 1) != LUA_TSTRING && lua_type(state, 1) != LUA_TNUMBER) {
    if (!luaL_callmeta(state, 1, "__tostring") || !lua_isstring(state, -1)) {
      lua_pushfstring(state, "(error object is a %s value)", luaL_typename(state, 1));
    }
    lua_replace(state, 1);
  }
  push_traceback_slot_key(state);
  luaL_traceback(state, state, nullptr, 1);
  lua_rawset(state, LUA_REGISTRYINDEX);
  lua_settop(state, 1);
  return 1;
}

// A hook's error message or traceback as meshrun keeps it: at most this
// many bytes, the rest counted. Every rank logs it, so a script's
// error(string.rep("e", 1 << 28)) must not become gigabytes of log.
constexpr size_t kMaxHookMessageBytes = 4096;

std::string bounded(const char* text, size_t length) {
  if (length <= kMaxHookMessageBytes) return std::string(text, length);
  return std::string(text, kMaxHookMessageBytes) + "… (" + std::to_string(length - kMaxHookMessageBytes) +
         " more bytes cut)";
}

std::string take_traceback(lua_State* state) {
  push_traceback_slot_key(state);
  lua_rawget(state, LUA_REGISTRYINDEX);
  std::string traceback;
  if (lua_type(state, -1) == LUA_TSTRING) {
    size_t length = 0;
    const char* text = lua_tolstring(state, -1, &length);
    traceback = bounded(text, length);
  }
  lua_pop(state, 1);
  push_traceback_slot_key(state);
  lua_pushboolean(state, 0);
  lua_rawset(state, LUA_REGISTRYINDEX);
  return traceback;
}

std::string string_at(lua_State* state, int index) {
  size_t length = 0;
  const char* text = lua_tolstring(state, index, &length);
  return text != nullptr ? bounded(text, length) : std::string("(error object is not a string)");
}

}  // namespace

int protected_call(lua_State* state, int nargs, int nresults, const HookOptions& options,
                   std::string& error, std::string& traceback) {
  const int handler_index = lua_gettop(state) - nargs;
  lua_pushcfunction(state, record_traceback);
  lua_insert(state, handler_index);
  take_traceback(state);  // clears a stale one

  int status = 0;
  bool exceeded = false;
  std::string exceeded_message;
  std::string memory_message;
  MemoryBudget* budget = MemoryBudget::of(state);
  if (budget != nullptr) budget->clear_refused();
  {
    CallLimits limits(state, options);
    status = lua_pcall(state, nargs, nresults, handler_index);
    exceeded = limits.exceeded();
    if (exceeded) exceeded_message = limits.exceeded_message();
    if (budget != nullptr && budget->refused()) {
      memory_message = std::string(limits.last_location()) + (*limits.last_location() ? " " : "") +
                       memory_limit_message(budget->limit());
    }
  }

  if (status != 0) {
    error = string_at(state, -1);
    // LuaJIT's memory error carries no location (and runs no handler): the
    // budget's refusal is the cause, at the line the count hook last saw.
    if (!memory_message.empty() && (status == LUA_ERRMEM || error == "not enough memory")) {
      error = memory_message;
    }
    // A limit hit while Lua was handling another error surfaces as "error in
    // error handling"; the limit is the cause worth reporting.
    if (exceeded && error.find(exceeded_message) == std::string::npos) error = exceeded_message;
    traceback = take_traceback(state);
    lua_settop(state, handler_index - 1);
    return status;
  }
  if (exceeded) {
    // Reached only when the script caught the limit's error and then
    // returned without running another instruction (e.g. `return pcall(f)`).
    error = exceeded_message;
    traceback.clear();
    lua_settop(state, handler_index - 1);
    return LUA_ERRRUN;
  }
  lua_remove(state, handler_index);
  return 0;
}

}  // namespace meshrun::hooks_detail
