// Internal to the hooks subsystem: the environment a sandboxed script runs
// in. It is a fresh table holding only safe base functions, private copies of
// string/table/math/bit/coroutine (so a script cannot alter the libraries of
// the state; string's pattern functions are the bounded ones of
// bounded_patterns.hpp), and restricted os and io tables whose missing
// members raise "sandbox: os.execute is not allowed (...)" instead of a bare
// nil call. Files (io.open, io.lines, loadfile, dofile, require) are confined to
// the script's folder and chunks must be text, never bytecode; require also
// finds the embedded meshrun.* library (library_modules.hpp). `ffi`, `jit`,
// `debug`, `package`, newproxy, getfenv/setfenv and collectgarbage are
// absent: no pointer, no finalizer and no hook can be made by the script. xpcall
// skips the script's message handler once the call is over its limits,
// because LuaJIT would run that handler with hooks disabled. Library
// functions that call back into Lua from C (coroutine.resume/wrap,
// table.sort, string.format, print) are wrapped in a NestedCallGuard
// (instruction_limit.hpp), table.insert refuses positions past #t + 1, and
// getmetatable("") gives a read-only stand-in of the string metatable.
//
// What holds, and the tests that try each escape, is listed in
// docs/hooks.md ("Sandbox and limits").
#pragma once

#include <string>

struct lua_State;

namespace meshrun::hooks_detail {

// Pushes the environment table. It also points the string metatable's
// __index at the sandbox's string copy, so methods on strings see what the
// script sees. Must run protected: it allocates and may raise.
void push_sandbox_environment(lua_State* state, const std::string& script_folder);

}  // namespace meshrun::hooks_detail
