// Escape attempts against the sandbox's limits: every way a script might run
// past its instruction limit (coroutines, metamethods, library calls that
// call back, pattern matching in C) or its memory budget must be stopped,
// quickly, with the limit's message at the script's line.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include <lua.hpp>

#include "hook_test_support.hpp"
#include "src/hooks/protected_call.hpp"
#include "src/hooks/script_environment.hpp"
#include "meshrun/hooks/hooks.hpp"

using meshrun::HookError;
using meshrun::HookOptions;
using meshrun::HookScript;
using meshrun::hooks_detail::protected_call;
using meshrun::hooks_detail::push_script_function;
using meshrun::hooks_test::load_failure;
using meshrun::hooks_test::ScratchFolder;

namespace {

struct Escape {
  const char* code;
  const char* expected_message;
  int line;  // of `code` (put on the script's second line); 0: none, -1: any
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

HookOptions small_limits() {
  HookOptions options;
  options.instruction_limit = 2'000'000;
  options.wall_seconds = 20;  // a failure of the instruction limit shows as this, slowly
  options.memory_limit_mb = 64;
  return options;
}

}  // namespace

TEST_CASE("no way around the instruction limit") {
  const Escape escapes[] = {
      {"local co = coroutine.wrap(function() while true do end end)\nco()\n",
       "instruction limit of 2000000 exceeded", 1},
      // The coroutine's error is swallowed by resume; the loop around it is stopped.
      {"local co = coroutine.create(function() while true do end end)\n"
       "while true do coroutine.resume(co) end\n",
       "instruction limit of 2000000 exceeded", 2},
      {"local t = setmetatable({}, {__index = function() while true do end end})\n"
       "local x = t.missing\n",
       "instruction limit of 2000000 exceeded", 1},
      {"local t = setmetatable({}, {__tostring = function() while true do end end})\n"
       "local s = tostring(t)\n",
       "instruction limit of 2000000 exceeded", 1},
      {"local t = setmetatable({}, {__add = function() while true do end end})\nlocal x = t + 1\n",
       "instruction limit of 2000000 exceeded", 1},
      {"table.sort({3, 2, 1}, function(a, b) while true do end end)\n",
       "instruction limit of 2000000 exceeded", 1},
      {"local s = ('abc'):gsub('.', function() while true do end end)\n",
       "instruction limit of 2000000 exceeded", 1},
      {"local f = load('while true do end')\nf()\n", "instruction limit of 2000000 exceeded", 2},
      {"while true do pcall(error, 'x') end\n", "instruction limit of 2000000 exceeded", 1},
      // Backtracking in C: cubic in the subject, hours for LuaJIT's own matcher.
      {"local s = string.rep('a', 30000)\nlocal i = string.find(s, '.-.-.-b')\n",
       "instruction limit of 2000000 exceeded", 2},
      {"local s = string.rep('a', 30000)\nlocal a, b = s:match('(a*)(a*)(a*)b')\n",
       "instruction limit of 2000000 exceeded", 2},
      {"local s = string.rep('a', 30000)\nfor x in s:gmatch('a*a*a*b') do end\n",
       "instruction limit of 2000000 exceeded", 2},
      {"local s = string.rep('a', 30000)\nlocal r = s:gsub('a-a-a-b', 'x')\n",
       "instruction limit of 2000000 exceeded", 2},
      {"local s = string.rep('(', 30000)\nlocal i = s:find('%b()%b()')\n",
       "instruction limit of 2000000 exceeded", 2},
      // A plain search that compares a long needle at every position.
      {"local s = string.rep('a', 1000000)\n"
       "local i = s:find(string.rep('a', 5000) .. 'b', 1, true)\n",
       "instruction limit of 2000000 exceeded", 2},
      // The script's error object converts itself into a message forever.
      {"error(setmetatable({}, {__tostring = function() while true do end end}))\n",
       "instruction limit of 2000000 exceeded", 0},
  };
  ScratchFolder scratch;
  for (const Escape& escape : escapes) {
    const std::string shown = escape.code;
    CAPTURE(shown);
    const auto start = std::chrono::steady_clock::now();
    const std::string code = std::string("-- escape\n") + escape.code;
    const HookError error = load_failure(scratch.write("escape.lua", code), small_limits());
    CHECK(contains(error.message(), escape.expected_message));
    CHECK(error.line() == (escape.line == 0 ? 0 : escape.line + 1));
    CHECK(seconds_since(start) < 5.0);
  }
}

TEST_CASE("pattern matching that stays within the limit is not refused") {
  ScratchFolder scratch;
  const std::string code =
      "local s = string.rep('ab ', 20000)\n"
      "local count = 0\n"
      "for word in s:gmatch('%a+') do count = count + 1 end\n"
      "assert(count == 20000, count)\n"
      "assert(s:find('ab ab', 1, true) == 1)\n"
      "assert(select(2, s:gsub('ab', 'x')) == 20000)\n"
      "assert(('  padded  '):match('^%s*(.-)%s*$') == 'padded')\n";
  CHECK_NOTHROW(HookScript::load(scratch.write("fine.lua", code), small_limits()));
}

TEST_CASE("the memory budget stops a script that grows, at its line") {
  const Escape escapes[] = {
      {"local t = {}\nfor i = 1, 1e9 do t[i] = i end\n", "memory limit of 64 MiB exceeded", 2},
      {"local t = {}\nfor i = 1, 1e9 do t[#t + 1] = tostring(i) .. 'padding to grow' end\n",
       "memory limit of 64 MiB exceeded", 2},
      // One request far past the limit, made in C.
      {"local s = string.rep('x', 2 ^ 30)\n", "memory limit of 64 MiB exceeded", -1},
      {"local parts = {}\nfor i = 1, 40 do parts[i] = string.rep('y', 2 ^ 20) end\n"
       "local s = table.concat(parts) .. table.concat(parts)\n",
       "memory limit of 64 MiB exceeded", -1},
      // Catching the error does not help a script that keeps what it holds.
      {"local t = {}\n"
       "for round = 1, 100 do pcall(function() for i = 1, 1e9 do t[#t + 1] = {i} end end) end\n",
       "memory limit of 64 MiB exceeded", 2},
  };
  ScratchFolder scratch;
  for (const Escape& escape : escapes) {
    const std::string shown = escape.code;
    CAPTURE(shown);
    const auto start = std::chrono::steady_clock::now();
    HookOptions options = small_limits();
    options.instruction_limit = 0;  // the budget alone must stop it
    const std::string code = std::string("-- grows\n") + escape.code;
    const HookError error = load_failure(scratch.write("grows.lua", code), options);
    CHECK(error.message() == escape.expected_message);
    // A single request in C may come before the hook saw any line.
    if (escape.line >= 0) CHECK(error.line() == escape.line + 1);
    CHECK(error.hook_point() == "load");
    CHECK(seconds_since(start) < 10.0);
  }
}

TEST_CASE("garbage does not count against a script whose live data fits") {
  ScratchFolder scratch;
  // Gigabytes allocated in all, never more than 20 MiB alive (with small
  // objects, 40 MiB: the budget runs the collector past half of it).
  const std::string code =
      "local keep = {}\n"
      "for i = 1, 20 do keep[i] = string.rep('k', 2 ^ 20) .. i end\n"
      "for i = 1, 3000 do local s = string.rep('x', 2 ^ 20) .. i end\n"
      "for i = 21, 40 do keep[i] = string.rep('k', 2 ^ 20) .. i end\n"
      "for i = 1, 2000000 do local t = {i, {}} end\n";
  HookOptions options = small_limits();
  options.instruction_limit = 0;
  CHECK_NOTHROW(HookScript::load(scratch.write("churn.lua", code), options));
}

TEST_CASE("a script that hit its memory budget in one call still serves the next") {
  ScratchFolder scratch;
  const std::string code =
      "function grow() local t = {} for i = 1, 1e9 do t[i] = i end end\n"
      "function small() return #string.rep('z', 1000) end\n";
  HookOptions options = small_limits();
  options.instruction_limit = 0;
  auto script = HookScript::load(scratch.write("calls.lua", code), options);
  lua_State* state = script->state();
  std::string error;
  std::string traceback;
  REQUIRE(push_script_function(state, "grow"));
  CHECK(protected_call(state, 0, 0, options, error, traceback) != 0);
  CHECK(error == scratch.folder().string() + "/calls.lua:1: memory limit of 64 MiB exceeded");
  REQUIRE(push_script_function(state, "small"));
  REQUIRE(protected_call(state, 0, 1, options, error, traceback) == 0);
  CHECK(lua_tointeger(state, -1) == 1000);
  lua_pop(state, 1);
}

TEST_CASE("recursion through C functions that call back into Lua stops with an error") {
  // Each nests a C frame per level, which LuaJIT does not count: without a
  // bound they overflowed the C stack (a crash).
  const char* recursions[] = {
      "local function f(s) return (s:gsub('a', f)) end\nf('a')\n",
      "local t\nt = setmetatable({}, {__index = function(_, k) return (k:gsub('a', t)) end})\n"
      "local r = ('a'):gsub('a', t)\n",
      "local function f(n) local co = coroutine.wrap(function() return f(n + 1) end) "
      "return co() end\nf(1)\n",
      "local function f() local ok, e = coroutine.resume(coroutine.create(f)) "
      "if not ok then error(e, 0) end end\nf()\n",
      "local function f(n) return load(function() f(n + 1) end) end\nf(1)\n",
      "local function f() table.sort({1, 2, 3}, function(a, b) f() return a < b end) end\nf()\n",
      "local t = setmetatable({}, {__tostring = function(self) return string.format('%s', self) "
      "end})\nlocal s = tostring(t)\n",
      "local t = setmetatable({}, {__tostring = function(self) print(self) return 'x' end})\n"
      "print(t)\n",
      "dofile('again.lua')\n",
  };
  ScratchFolder scratch;
  scratch.write("again.lua", "dofile('again.lua')\n");
  for (const char* recursion : recursions) {
    const std::string shown = recursion;
    CAPTURE(shown);
    const auto start = std::chrono::steady_clock::now();
    const HookError error =
        load_failure(scratch.write("deep.lua", std::string("-- deep\n") + recursion));
    CHECK(contains(error.message(), "C stack overflow: "));
    CHECK(contains(error.message(), "nested too deeply"));
    CHECK(seconds_since(start) < 5.0);
  }
}

TEST_CASE("nesting within the bound works, and a caught overflow leaves no depth behind") {
  ScratchFolder scratch;
  const std::string code =
      "local function f(s) return (s:gsub('a', f)) end\n"
      "for i = 1, 10 do assert(not pcall(f, 'a')) end\n"
      "local function nest(n)\n"
      "  if n == 0 then return 'done' end\n"
      "  return (('a'):gsub('a', function() return nest(n - 1) end))\n"
      "end\n"
      "assert(nest(150) == 'done')\n"
      "local co = coroutine.wrap(function(x) coroutine.yield(x + 1) return 'end' end)\n"
      "assert(co(1) == 2 and co() == 'end')\n"
      "local t = {3, 1, 2}\ntable.sort(t, function(a, b) return a > b end)\n"
      "assert(t[1] == 3 and t[3] == 1)\n"
      "assert(string.format('%d-%s', 4, 'x') == '4-x')\n";
  CHECK_NOTHROW(HookScript::load(scratch.write("fine.lua", code), {}));
}

TEST_CASE("guarded library functions still name themselves and the script line") {
  ScratchFolder scratch;
  const HookError error =
      load_failure(scratch.write("format.lua", "-- format\nlocal s = string.format('%d', 'x')\n"));
  CHECK(contains(error.message(), "bad argument #2 to 'string.format'"));
  CHECK(error.line() == 2);
}

TEST_CASE("table.insert refuses a position past the end instead of shifting for seconds") {
  ScratchFolder scratch;
  const auto start = std::chrono::steady_clock::now();
  const HookError error =
      load_failure(scratch.write("insert.lua", "-- insert\ntable.insert({}, 2 ^ 53, 1)\n"));
  CHECK(contains(error.message(), "position out of bounds"));
  CHECK(error.line() == 2);
  CHECK(seconds_since(start) < 2.0);
  const std::string fine =
      "local t = {1, 2}\ntable.insert(t, 3, 'c')\ntable.insert(t, 1, 'a')\ntable.insert(t, 'z')\n"
      "assert(#t == 5 and t[1] == 'a' and t[4] == 'c' and t[5] == 'z')\n";
  CHECK_NOTHROW(HookScript::load(scratch.write("fine.lua", fine), {}));
}

TEST_CASE("a script cannot change the string metatable shared by the state") {
  ScratchFolder scratch;
  const HookError error = load_failure(scratch.write(
      "metatable.lua",
      "assert(('x'):upper() == 'X')\n"
      "assert(getmetatable('').__index.upper == string.upper)\n"
      "getmetatable('').__index = {}\n"));
  CHECK(contains(error.message(), "sandbox: the string metatable is read-only"));
  CHECK(error.line() == 3);
  const std::string code =
      "rawset(getmetatable(''), '__index', {})\n"
      "assert(('x'):upper() == 'X')\n";
  CHECK_NOTHROW(HookScript::load(scratch.write("rawset.lua", code), {}));
}

TEST_CASE("a script whose constants exceed the memory budget gets the budget's error") {
  // The chunk alone is over the budget before it runs: arming the call used
  // to allocate unprotected, and LuaJIT's panic ended the process silently.
  ScratchFolder scratch;
  std::string code = "local x = {";
  for (int i = 1; i <= 300000; ++i) code += std::to_string(i) + ",";
  code += "}\nfunction reward(batch) end\n";
  HookOptions options;
  options.memory_limit_mb = 4;
  const HookError error = load_failure(scratch.write("big.lua", code), options);
  CHECK(contains(error.message(), "memory limit of 4 MiB exceeded"));
}

TEST_CASE("a Lua error outside a protected call throws a HookError naming the script") {
  ScratchFolder scratch;
  const std::string path = scratch.write("plain.lua", "x = 1\n");
  auto script = HookScript::load(path, {});
  lua_State* state = script->state();
  const lua_CFunction panic = lua_atpanic(state, nullptr);
  lua_atpanic(state, panic);
  REQUIRE((panic != nullptr));
  lua_pushliteral(state, "boom");
  try {
    panic(state);
    FAIL("the panic handler returned");
  } catch (const HookError& error) {
    CHECK(error.script() == path);
    CHECK(contains(error.message(), "outside a protected call: boom"));
  }
  lua_settop(state, 0);
}
