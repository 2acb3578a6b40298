#include <doctest/doctest.h>

#include <lua.hpp>

#include "src/hooks/protected_call.hpp"
#include "src/hooks/script_environment.hpp"
#include "hook_test_support.hpp"
#include "meshrun/hooks/hooks.hpp"

using meshrun::HookError;
using meshrun::HookOptions;
using meshrun::HookScript;
using meshrun::hooks_test::fixture;
using meshrun::hooks_test::load_failure;
using meshrun::hooks_test::ScratchFolder;

TEST_CASE("a script's global functions are its hooks") {
  auto script = HookScript::load(fixture("functions.lua"), {});
  CHECK(script->path() == fixture("functions.lua"));
  CHECK(script->options().sandbox);
  CHECK(script->state() != nullptr);
  CHECK(script->has_function("reward"));
  CHECK(script->has_function("on_step"));
  CHECK_FALSE(script->has_function("double"));     // local
  CHECK_FALSE(script->has_function("threshold"));  // not a function
  CHECK_FALSE(script->has_function("print"));      // built-in
  CHECK_FALSE(script->has_function("missing"));
  CHECK(script->function_names() == std::vector<std::string>{"on_step", "reward"});
  CHECK(lua_gettop(script->state()) == 0);  // loading and lookups leave the stack as they found it
}

TEST_CASE("the table the main chunk returns is searched first") {
  auto script = HookScript::load(fixture("exports.lua"), {});
  CHECK(script->has_function("reward"));
  CHECK(script->has_function("on_step"));
  // The exported on_rollout is a string, so the global function is found.
  CHECK(script->has_function("on_rollout"));
  CHECK_FALSE(script->has_function("name"));
  CHECK(script->function_names() == std::vector<std::string>{"on_rollout", "on_step", "reward"});

  // The exported reward wins over the global one.
  lua_State* state = script->state();
  REQUIRE(meshrun::hooks_detail::push_script_function(state, "reward"));
  std::string error;
  std::string traceback;
  const int status =
      meshrun::hooks_detail::protected_call(state, 0, 1, script->options(), error, traceback);
  REQUIRE(status == 0);
  CHECK(std::string(lua_tostring(state, -1)) == "exported");
  lua_pop(state, 1);
  CHECK(lua_gettop(state) == 0);
}

TEST_CASE("without a sandbox the standard globals are not taken for hooks") {
  HookOptions options;
  options.sandbox = false;
  auto script = HookScript::load(fixture("functions.lua"), options);
  CHECK(script->function_names() == std::vector<std::string>{"on_step", "reward"});
  CHECK_FALSE(script->has_function("print"));
  CHECK_FALSE(script->has_function("require"));
}

TEST_CASE("a syntax error names its line and keeps Lua's message") {
  const HookError error = load_failure(fixture("syntax_error.lua"));
  CHECK(error.script() == fixture("syntax_error.lua"));
  CHECK(error.line() == 3);
  CHECK(error.hook_point() == "load");
  CHECK(error.message() == "unexpected symbol near '='");
  CHECK(error.traceback().empty());
  CHECK(std::string(error.what()) ==
        fixture("syntax_error.lua") + ":3: in hook point 'load': unexpected symbol near '='");
}

TEST_CASE("a runtime error in the main chunk names the line where it was raised") {
  const HookError error = load_failure(fixture("runtime_error.lua"));
  CHECK(error.line() == 2);
  CHECK(error.hook_point() == "load");
  CHECK(error.message() == "configuration is broken");
  CHECK(error.traceback().starts_with("stack traceback:"));
  CHECK(error.traceback().find("runtime_error.lua:6:") != std::string::npos);
  CHECK(error.traceback().find("runtime_error.lua:9:") != std::string::npos);
  const std::string what = error.what();
  CHECK(what.starts_with(fixture("runtime_error.lua") +
                         ":2: in hook point 'load': configuration is broken\nstack traceback:"));
}

TEST_CASE("a missing script is a HookError") {
  const std::string path = fixture("no_such_script.lua");
  const HookError error = load_failure(path);
  CHECK(error.script() == path);
  CHECK(error.line() == 0);
  CHECK(error.hook_point() == "load");
  CHECK(error.message().find("No such file or directory") != std::string::npos);
  CHECK(std::string(error.what()).starts_with(path + ": in hook point 'load': cannot open "));
}

TEST_CASE("a folder is not a script") {
  const HookError error = load_failure(fixture("confined"));
  CHECK(error.message().ends_with("it is a folder, not a script"));
}

TEST_CASE("error objects that are not strings are described") {
  ScratchFolder scratch;
  SUBCASE("a table") {
    const HookError error = load_failure(scratch.write("table.lua", "error({})\n"));
    CHECK(error.message() == "(error object is a table value)");
    CHECK(error.line() == 1);  // from the traceback, since the message has no location
  }
  SUBCASE("a table with __tostring") {
    const HookError error = load_failure(scratch.write(
        "custom.lua",
        "\nerror(setmetatable({}, {__tostring = function() return 'custom failure' end}))\n"));
    CHECK(error.message() == "custom failure");
    CHECK(error.line() == 2);
  }
}

TEST_CASE("a rethrown error keeps the line where it started") {
  ScratchFolder scratch;
  const HookError error = load_failure(scratch.write("rethrow.lua",
                                                     "local ok, message = pcall(function()\n"
                                                     "  error('inner')\n"
                                                     "end)\n"
                                                     "error(message)\n"));
  CHECK(error.line() == 2);
  CHECK(error.message() == "inner");
}

TEST_CASE("an error in a module keeps the module's location in the message") {
  ScratchFolder scratch;
  scratch.write("broken.lua", "local x = nil\nreturn x.field\n");
  const std::string path = scratch.write("uses_broken.lua", "\nlocal broken = require('broken')\n");
  const HookError error = load_failure(path);
  CHECK(error.line() == 2);  // the script's own line that led there
  CHECK(error.message().find("broken.lua:2: attempt to index local 'x'") != std::string::npos);
}

TEST_CASE("a script with a long path is still located") {
  ScratchFolder scratch;
  const std::string path = scratch.write(
      "a/folder/name/long/enough/that/lua/shortens/it/in/messages/with/an/ellipsis/failing.lua",
      "local a = 1\nerror('deep')\n");
  REQUIRE(path.size() > LUA_IDSIZE);
  const HookError error = load_failure(path);
  CHECK(error.line() == 2);
  CHECK(error.message() == "deep");
}

TEST_CASE("each script owns its state") {
  auto first = HookScript::load(fixture("functions.lua"), {});
  auto second = HookScript::load(fixture("functions.lua"), {});
  CHECK(first->state() != second->state());
}
