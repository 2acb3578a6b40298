// Internal to the hooks subsystem: the one way meshrun runs Lua code of a
// hook script. protected_call is lua_pcall with a traceback message handler
// and the script's per-call limits armed (see instruction_limit.hpp).
#pragma once

#include <string>

#include "meshrun/hooks/hooks.hpp"

namespace meshrun::hooks_detail {

// Calls the function below `nargs` arguments on the stack, like lua_pcall.
// Returns 0 with `nresults` results on the stack (LUA_MULTRET allowed), or a
// Lua error status with the function and arguments popped, `error` set to the
// message (non-string error objects described) and `traceback` to
// "stack traceback:\n..." when Lua produced one. A call that exceeded a limit
// fails even if the script caught the limit's error itself; one that ran
// out of its memory budget fails with "memory limit of N MiB exceeded".
int protected_call(lua_State* state, int nargs, int nresults, const HookOptions& options,
                   std::string& error, std::string& traceback);

}  // namespace meshrun::hooks_detail
