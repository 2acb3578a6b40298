// Internal to the hooks subsystem: string.find, string.match, string.gmatch
// and string.gsub for sandboxed scripts, with Lua 5.1's pattern language as
// LuaJIT implements it (same results, same error messages), but counting
// their matching work against the call's instruction limit.
//
// Why not LuaJIT's own: its matcher backtracks in C, where the count hook
// never runs, so `string.find(string.rep("a", 3e4), ".-.-.-b")` would run for
// hours past every limit. Here every step of the matcher (a pattern item
// tried at a subject position, a byte of a plain search) is one instruction
// charged to the armed CallLimits, which raises the usual "instruction
// limit of N exceeded" at the script line that called. No library offers
// Lua patterns with a step budget, hence this hand-written matcher; the
// hooks tests compare it with LuaJIT's on generated patterns.
#pragma once

struct lua_State;

namespace meshrun::hooks_detail {

// Replaces find, match, gmatch and gsub in the table at `string_index` (the
// sandbox's copy of the string library).
void add_bounded_patterns(lua_State* state, int string_index);

}  // namespace meshrun::hooks_detail
