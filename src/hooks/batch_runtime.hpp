// Internal to the hooks subsystem: the trusted Lua code behind batch objects
// (batch_runtime.lua). It is installed in every state before the script
// runs, while the globals and the real ffi are still the state's own, and
// kept in the registry where no script can reach it.
#pragma once

struct lua_State;

namespace meshrun::hooks_detail {

// Runs batch_runtime.lua and keeps the table it returns. Must run protected.
void install_batch_runtime(lua_State* state);

// Pushes the runtime's function `name` ("open", "close").
void push_batch_runtime_function(lua_State* state, const char* name);

// Whether a frame whose lua_Debug::source is `source` runs the runtime's
// code. Errors the runtime did not raise itself (an exceeded limit) are
// blamed on the script line that called into it instead.
bool is_batch_runtime_source(const char* source);

}  // namespace meshrun::hooks_detail
