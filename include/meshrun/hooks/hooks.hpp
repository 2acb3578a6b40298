// Hooks: a LuaJIT script loaded once per process, whose functions meshrun
// calls at hook points (reward, on_rollout, on_step).
//
// A script runs in a sandbox by default: no os.execute, io.popen, ffi,
// debug, bytecode loading, or file access outside the script's own folder;
// the JIT engine is off for the state so the instruction limit (a count
// hook) fires even inside hot loops, and pattern matching counts against it
// too. Every script's state has a memory budget (memory_limit_mb). With sandbox = false the JIT is on; the wall-clock
// deadline is checked by the same hook, and LuaJIT runs no hook inside
// compiled code, so a JIT-compiled hot loop of a trusted script is stopped
// only by the job-level timeout. Every call runs protected with a traceback
// handler; any failure is thrown as a HookError that names the script, line
// and hook point. A HookScript is not thread-safe.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
#include "meshrun/error.hpp"

struct lua_State;

namespace meshrun {

struct HooksConfig;
namespace hooks_detail {
class MemoryBudget;
}

struct HookOptions {
  bool sandbox = true;
  long long instruction_limit = 100'000'000;  // per call (and for loading); <= 0: none
  double wall_seconds = 60;  // per call; <= 0: none; interpreted code only, like the above
  // What the script's Lua state may hold while script code runs, garbage
  // included until collected; 0: none.
  long long memory_limit_mb = 256;
};

// The options a recipe's [hooks] section asks for.
HookOptions hook_options_of(const HooksConfig& hooks);

class HookError : public KindError<ErrorKind::hook> {
 public:
  HookError(std::string script, int line, std::string hook_point, std::string message,
            std::string traceback);
  const std::string& script() const { return script_; }
  int line() const { return line_; }  // 0 when unknown
  const std::string& hook_point() const { return hook_point_; }  // "load" while loading
  const std::string& message() const { return message_; }  // Lua's message, without location
  const std::string& traceback() const { return traceback_; }

 private:
  std::string script_;
  int line_;
  std::string hook_point_;
  std::string message_;
  std::string traceback_;
};

class HookScript {
 public:
  // Compiles and runs the script's main chunk. Throws HookError (hook point
  // "load") on a missing file, a syntax error, a runtime error, a sandbox
  // violation or an exceeded limit.
  static std::unique_ptr<HookScript> load(const std::string& path, const HookOptions& options);
  ~HookScript();
  HookScript(const HookScript&) = delete;
  HookScript& operator=(const HookScript&) = delete;

  // A function is found as a global of the script, or as a field of the
  // table the main chunk returned (the returned table wins).
  bool has_function(std::string_view name) const;
  // Every function found that way, sorted.
  std::vector<std::string> function_names() const;
  const std::string& path() const { return path_; }
  const HookOptions& options() const { return options_; }
  lua_State* state() const { return state_; }  // for the batch bindings

 private:
  HookScript(std::string path, HookOptions options);
  std::string path_;
  HookOptions options_;
  // Outlives the state, which frees its memory through it when closed.
  std::unique_ptr<hooks_detail::MemoryBudget> budget_;
  lua_State* state_ = nullptr;
};

}  // namespace meshrun
