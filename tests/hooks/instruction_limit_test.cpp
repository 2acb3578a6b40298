#include <doctest/doctest.h>

#include <chrono>
#include <lua.hpp>

#include "src/hooks/protected_call.hpp"
#include "src/hooks/script_environment.hpp"
#include "hook_test_support.hpp"
#include "meshrun/hooks/hooks.hpp"

using meshrun::HookError;
using meshrun::HookOptions;
using meshrun::HookScript;
using meshrun::hooks_detail::protected_call;
using meshrun::hooks_detail::push_script_function;
using meshrun::hooks_test::fixture;
using meshrun::hooks_test::load_failure;
using meshrun::hooks_test::ScratchFolder;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Calls the script's global `name` with one integer argument.
int call_with(HookScript& script, const char* name, long long argument, std::string& error) {
  lua_State* state = script.state();
  REQUIRE(push_script_function(state, name));
  lua_pushinteger(state, static_cast<lua_Integer>(argument));
  std::string traceback;
  const int status = protected_call(state, 1, 0, script.options(), error, traceback);
  CHECK(lua_gettop(state) == 0);
  return status;
}

}  // namespace

TEST_CASE("the instruction limit stops a sandboxed hot loop quickly, at its line") {
  const auto start = std::chrono::steady_clock::now();
  SUBCASE("in the main chunk") {
    const HookError error = load_failure(fixture("hot_loop_main.lua"));
    CHECK(error.line() == 2);
    CHECK(error.message() == "instruction limit of 100000000 exceeded");
    CHECK(error.hook_point() == "load");
  }
  SUBCASE("in a function called while loading") {
    const HookError error = load_failure(fixture("hot_loop_function.lua"));
    CHECK(error.line() >= 3);
    CHECK(error.line() <= 5);
    CHECK(error.message() == "instruction limit of 100000000 exceeded");
    CHECK(contains(error.traceback(), "hot_loop_function.lua:8:"));
  }
  CHECK(seconds_since(start) < 2.0);
}

TEST_CASE("a script cannot outlast the limit by catching its error") {
  ScratchFolder scratch;
  HookOptions options;
  options.instruction_limit = 1'000'000;
  const auto start = std::chrono::steady_clock::now();
  SUBCASE("pcall in a loop") {
    const HookError error = load_failure(
        scratch.write("swallow.lua",
                      "while true do\n  pcall(function() while true do end end)\nend\n"),
        options);
    CHECK(error.message() == "instruction limit of 1000000 exceeded");
  }
  SUBCASE("returning pcall's result directly") {
    const HookError error = load_failure(
        scratch.write("tail.lua", "return pcall(function() while true do end end)\n"), options);
    CHECK(error.message() == "instruction limit of 1000000 exceeded");
  }
  SUBCASE("inside a coroutine") {
    const HookError error = load_failure(
        scratch.write("coroutine.lua", "coroutine.wrap(function() while true do end end)()\n"),
        options);
    CHECK(contains(error.message(), "instruction limit of 1000000 exceeded"));
  }
  SUBCASE("in an error handler") {
    const HookError error = load_failure(
        scratch.write(
            "handler.lua",
            "while true do\n"
            "  xpcall(function() while true do end end, function() while true do end end)\n"
            "end\n"),
        options);
    CHECK(contains(error.message(), "instruction limit of 1000000 exceeded"));
  }
  SUBCASE("in the __tostring of an error object") {
    const HookError error = load_failure(
        scratch.write("tostring.lua",
                      "error(setmetatable({}, {__tostring = function() while true do end end}))\n"),
        options);
    CHECK(contains(error.message(), "instruction limit of 1000000 exceeded"));
  }
  CHECK(seconds_since(start) < 2.0);
}

TEST_CASE("xpcall handlers still work within the limits") {
  ScratchFolder scratch;
  const std::string path = scratch.write(
      "handled.lua",
      "local ok, message = xpcall(function(a, b) error(a .. b, 0) end,\n"
      "                           function(m) return 'handled: ' .. m end, 'x', 'y')\n"
      "assert(not ok and message == 'handled: xy', message)\n"
      "local co = coroutine.wrap(function()\n"
      "  return xpcall(function() coroutine.yield(1) return 2 end, print)\n"
      "end)\n"
      "assert(co() == 1)\n"
      "local done, value = co()\n"
      "assert(done and value == 2)\n");
  CHECK_NOTHROW(HookScript::load(path, {}));
}

TEST_CASE("the wall-clock deadline stops a sandboxed loop") {
  HookOptions options;
  options.instruction_limit = 0;  // off, so only the deadline can stop it
  options.wall_seconds = 0.2;
  const auto start = std::chrono::steady_clock::now();
  const HookError error = load_failure(fixture("hot_loop_main.lua"), options);
  CHECK(error.message() == "wall-clock limit of 0.2 s exceeded");
  CHECK(error.line() == 2);
  CHECK(seconds_since(start) < 2.0);
}

TEST_CASE("without a sandbox the limit still stops interpreted code") {
  // A JIT-compiled `while true do end` would not be stopped: LuaJIT runs no
  // hook inside traces, and the job-level timeout is the backstop there. The
  // script turns the JIT off itself, so its loop is interpreted.
  HookOptions options;
  options.sandbox = false;
  options.instruction_limit = 1'000'000;
  const auto start = std::chrono::steady_clock::now();
  const HookError error = load_failure(fixture("jit_off_loop.lua"), options);
  CHECK(error.line() == 3);
  CHECK(error.message() == "instruction limit of 1000000 exceeded");
  CHECK(seconds_since(start) < 2.0);
}

TEST_CASE("each protected call has its own instruction budget") {
  ScratchFolder scratch;
  HookOptions options;
  options.instruction_limit = 1'000'000;
  auto script = HookScript::load(
      scratch.write("spin.lua", "function spin(turns)\n  for _ = 1, turns do end\nend\n"), options);
  std::string error;
  // Each call stays under the limit, together they do not.
  CHECK(call_with(*script, "spin", 300'000, error) == 0);
  CHECK(call_with(*script, "spin", 300'000, error) == 0);
  CHECK(call_with(*script, "spin", 300'000, error) == 0);
  CHECK(call_with(*script, "spin", 300'000, error) == 0);

  CHECK(call_with(*script, "spin", 100'000'000, error) == LUA_ERRRUN);
  CHECK(contains(error, "spin.lua:2: instruction limit of 1000000 exceeded"));

  // The state stays usable after a limit stopped a call.
  CHECK(call_with(*script, "spin", 300'000, error) == 0);
}

TEST_CASE("protected_call reports the message and the traceback separately") {
  ScratchFolder scratch;
  auto script = HookScript::load(scratch.write("fails.lua",
                                               "function fail(code)\n"
                                               "  error('failed with ' .. code)\n"
                                               "end\n"),
                                 {});
  std::string error;
  CHECK(call_with(*script, "fail", 7, error) == LUA_ERRRUN);
  CHECK(contains(error, "fails.lua:2: failed with 7"));
  CHECK_FALSE(contains(error, "stack traceback"));

  lua_State* state = script->state();
  REQUIRE(push_script_function(state, "fail"));
  lua_pushinteger(state, 8);
  std::string traceback;
  CHECK(protected_call(state, 1, 0, script->options(), error, traceback) == LUA_ERRRUN);
  CHECK(traceback.starts_with("stack traceback:"));
  CHECK(contains(traceback, "fails.lua:2: in function"));
}

TEST_CASE("protected_call returns every result when asked for LUA_MULTRET") {
  ScratchFolder scratch;
  auto script =
      HookScript::load(scratch.write("many.lua", "function many() return 1, 2, 3 end\n"), {});
  lua_State* state = script->state();
  lua_pushliteral(state, "below");
  REQUIRE(push_script_function(state, "many"));
  std::string error;
  std::string traceback;
  REQUIRE(protected_call(state, 0, LUA_MULTRET, script->options(), error, traceback) == 0);
  CHECK(lua_gettop(state) == 4);
  CHECK(lua_tointeger(state, 4) == 3);
  CHECK(std::string(lua_tostring(state, 1)) == "below");
  lua_settop(state, 0);
}

TEST_CASE("registry_pointer reads a C++ slot of the registry without touching the stack") {
  static const char key = 0;
  lua_State* state = luaL_newstate();
  REQUIRE(state != nullptr);
  lua_pushinteger(state, 7);  // something below, to see the stack is left alone
  CHECK(meshrun::hooks_detail::registry_pointer(state, &key) == nullptr);

  int value = 0;
  lua_pushlightuserdata(state, const_cast<char*>(&key));
  lua_pushlightuserdata(state, &value);
  lua_rawset(state, LUA_REGISTRYINDEX);
  CHECK(meshrun::hooks_detail::registry_pointer(state, &key) == &value);

  lua_pushlightuserdata(state, const_cast<char*>(&key));
  void* block = lua_newuserdata(state, sizeof(int));
  lua_rawset(state, LUA_REGISTRYINDEX);
  CHECK(meshrun::hooks_detail::registry_pointer(state, &key) == block);

  // A cleared slot holds false, not a pointer.
  lua_pushlightuserdata(state, const_cast<char*>(&key));
  lua_pushboolean(state, 0);
  lua_rawset(state, LUA_REGISTRYINDEX);
  CHECK(meshrun::hooks_detail::registry_pointer(state, &key) == nullptr);

  CHECK(lua_gettop(state) == 1);
  CHECK(lua_tointeger(state, 1) == 7);
  lua_close(state);
}
