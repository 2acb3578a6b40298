#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <lua.hpp>

#include "hook_test_support.hpp"
#include "meshrun/hooks/hooks.hpp"

using meshrun::HookError;
using meshrun::HookOptions;
using meshrun::HookScript;
using meshrun::hooks_test::fixture;
using meshrun::hooks_test::load_failure;
using meshrun::hooks_test::ScratchFolder;

namespace {

struct Violation {
  const char* code;
  const char* expected_message;  // a part of HookError::message()
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("the sandbox refuses escapes with an error that names them") {
  const Violation violations[] = {
      {"os.execute('true')", "sandbox: os.execute is not allowed"},
      {"os.getenv('HOME')", "sandbox: os.getenv is not allowed"},
      {"os.exit(1)", "sandbox: os.exit is not allowed"},
      {"os.remove('x')", "sandbox: os.remove is not allowed"},
      {"io.popen('ls')", "sandbox: io.popen is not allowed"},
      {"io.write('x')", "sandbox: io.write is not allowed"},
      {"require('ffi').load('c')", "sandbox: require('ffi') is not allowed"},
      {"local C = require('ffi').C", "sandbox: require('ffi') is not allowed"},
      {"local p = require('ffi').cast('int *', 0)", "sandbox: require('ffi') is not allowed"},
      {"ffi.new('char[1]')", "attempt to index global 'ffi' (a nil value)"},
      {"newproxy(true)", "attempt to call global 'newproxy' (a nil value)"},
      {"collectgarbage()", "attempt to call global 'collectgarbage' (a nil value)"},
      {"load(string.dump(function() end))",
       "sandbox: loading a binary (bytecode) chunk is not allowed"},
      {"loadstring(string.dump(function() end))",
       "sandbox: loading a binary (bytecode) chunk is not allowed"},
      {"load('return 1', 'x', 'b')", "sandbox: loading a binary (bytecode) chunk is not allowed"},
      {"io.open('/etc/passwd')", "sandbox: io.open('/etc/passwd') is outside the script folder"},
      {"io.open('../x')", "sandbox: io.open('../x') is outside the script folder"},
      {"io.lines('/etc/passwd')", "sandbox: io.lines('/etc/passwd') is outside the script folder"},
      {"io.lines()", "sandbox: io.lines() without a file name"},
      {"dofile('/etc/passwd')", "sandbox: dofile('/etc/passwd') is outside the script folder"},
      {"loadfile('../outside.lua')",
       "sandbox: loadfile('../outside.lua') is outside the script folder"},
      {"require('../outside')",
       "sandbox: require('../outside') does not name a module inside the script folder"},
      {"require('..outside')",
       "sandbox: require('..outside') does not name a module inside the script folder"},
      {"require('/etc/passwd')", "sandbox: require('/etc/passwd') does not name a module"},
      {"require('jit')", "sandbox: require('jit') is not allowed"},
      {"require('debug')", "sandbox: require('debug') is not allowed"},
      {"jit.on()", "attempt to index global 'jit' (a nil value)"},
      {"getfenv(0)", "attempt to call global 'getfenv' (a nil value)"},
      {"debug.getinfo(1)", "attempt to index global 'debug' (a nil value)"},
      {"package.loadlib('libc.so.6', 'system')", "attempt to index global 'package' (a nil value)"},
  };
  ScratchFolder scratch;
  scratch.write_outside("outside.lua", "return 1\n");
  for (const Violation& violation : violations) {
    CAPTURE(violation.code);
    const std::string path =
        scratch.write("violation.lua", std::string("\n") + violation.code + "\n");
    const HookError error = load_failure(path);
    CHECK(error.line() == 2);
    CHECK(error.hook_point() == "load");
    CHECK(contains(error.message(), violation.expected_message));
    if (contains(violation.expected_message, "sandbox:")) {
      CHECK(contains(error.message(), "(set [hooks] sandbox = false to lift it)"));
    }
  }
}

TEST_CASE("the sandbox lets a script use the files and modules of its own folder") {
  auto script = HookScript::load(fixture("confined/reads_data.lua"), {});
  CHECK(script->function_names() == std::vector<std::string>{"reward"});
}

TEST_CASE("a sandboxed script may write files inside its folder") {
  ScratchFolder scratch;
  const std::string path = scratch.write("writes.lua",
                                         "local file = assert(io.open('out/../result.txt', 'w'))\n"
                                         "file:write('written')\n"
                                         "file:close()\n");
  HookScript::load(path, {});
  std::ifstream written(scratch.folder() / "result.txt");
  std::string text;
  written >> text;
  CHECK(text == "written");
}

TEST_CASE("symbolic links cannot lead a sandboxed script outside its folder") {
  ScratchFolder scratch;
  scratch.write_outside("secret.txt", "secret\n");
  std::filesystem::create_directory_symlink(scratch.root(), scratch.folder() / "up");
  std::filesystem::create_symlink(scratch.root() / "created_outside.txt",
                                  scratch.folder() / "dangling.txt");
  std::filesystem::create_symlink(scratch.root() / "helper.lua", scratch.folder() / "helper.lua");
  scratch.write_outside("helper.lua", "return {}\n");

  SUBCASE("reading through a linked folder") {
    const HookError error = load_failure(scratch.write("escape.lua", "io.open('up/secret.txt')\n"));
    CHECK(contains(error.message(),
                   "sandbox: io.open('up/secret.txt') leads outside the script folder"));
    CHECK(contains(error.message(), "through a symbolic link"));
  }
  SUBCASE("creating a file through a dangling link") {
    const HookError error =
        load_failure(scratch.write("escape.lua", "io.open('dangling.txt', 'w')\n"));
    CHECK(contains(error.message(), "leads outside the script folder"));
    CHECK_FALSE(std::filesystem::exists(scratch.root() / "created_outside.txt"));
  }
  SUBCASE("requiring a linked module") {
    const HookError error = load_failure(scratch.write("escape.lua", "require('helper')\n"));
    CHECK(contains(error.message(), "sandbox: require('helper') leads outside the script folder"));
  }
}

TEST_CASE("a missing module is reported like Lua does") {
  ScratchFolder scratch;
  const HookError error = load_failure(scratch.write("needs.lua", "require('nowhere.module')\n"));
  CHECK(error.line() == 1);
  CHECK(contains(error.message(), "module 'nowhere.module' not found: no file '" +
                                      (scratch.folder() / "nowhere/module.lua").string() + "'"));
}

TEST_CASE("a sandboxed script may not be precompiled bytecode, nor load any") {
  ScratchFolder scratch;
  const std::string path = scratch.write("compiled.lua", std::string("\x1bLJ\x02", 4));
  const HookError error = load_failure(path);
  CHECK(contains(error.message(), "sandbox: a precompiled (bytecode) script is not allowed"));

  for (const char* loader : {"loadfile", "dofile", "require"}) {
    CAPTURE(loader);
    const std::string name = std::string(loader) == "require" ? "'compiled'" : "'compiled.lua'";
    const HookError loaded =
        load_failure(scratch.write("loads.lua", std::string(loader) + "(" + name + ")\n"));
    CHECK(contains(loaded.message(), "sandbox: loading a binary (bytecode) chunk is not allowed"));
  }
}

TEST_CASE("without a sandbox a script has the full standard environment") {
  HookOptions options;
  options.sandbox = false;
  auto script = HookScript::load(fixture("unsandboxed.lua"), options);
  CHECK(script->function_names() == std::vector<std::string>{"reward"});

  // The same script is refused in the sandbox.
  const HookError error = load_failure(fixture("unsandboxed.lua"));
  CHECK(error.line() == 2);
  CHECK(contains(error.message(), "sandbox: require('ffi') is not allowed"));
}

TEST_CASE("a script changes only its own copy of a library") {
  auto changed = HookScript::load(fixture("string_copy.lua"), {});

  // The state's real string library, which meshrun's own code would use, is intact.
  lua_State* state = changed->state();
  lua_getfield(state, LUA_REGISTRYINDEX, "_LOADED");
  lua_getfield(state, -1, "string");
  lua_getfield(state, -1, "upper");
  CHECK(lua_isfunction(state, -1));
  lua_getfield(state, -2, "shout");
  CHECK(lua_isnil(state, -1));
  lua_settop(state, 0);

  // Nor does another script see the change.
  CHECK_NOTHROW(HookScript::load(fixture("string_untouched.lua"), {}));
}

TEST_CASE("restricted libraries still offer their allowed members") {
  ScratchFolder scratch;
  const std::string path =
      scratch.write("allowed.lua",
                    "assert(type(os.time()) == 'number')\n"
                    "assert(type(os.clock()) == 'number')\n"
                    "assert(os.date('%Y', 0) == '1970')\n"
                    "assert(os.difftime(2, 1) == 1)\n"
                    "assert(os.nonexistent == nil)\n"
                    "assert(string.find('a.b', '.', 1, true) == 2 and ('x1y'):match('%d') == '1')\n"
                    "assert(select(2, ('aXbX'):gsub('X', '-')) == 2)\n"
                    "assert(bit.band(6, 3) == 2)\n"
                    "assert(math.floor(1.5) == 1 and table.concat({1, 2}) == '12')\n"
                    "assert(coroutine.wrap(function() coroutine.yield(7) end)() == 7)\n"
                    "assert(select('#', unpack({1, 2, 3})) == 3)\n"
                    "assert(_G.assert == assert and getfenv == nil)\n"
                    "assert(require('string') == string)\n"
                    "assert(type(print) == 'function')\n");
  CHECK_NOTHROW(HookScript::load(path, {}));
}
