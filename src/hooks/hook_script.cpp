// lua.hpp also brings luajit.h, inside the extern "C" block it needs.
#include <lua.hpp>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "batch_runtime.hpp"
#include "instruction_limit.hpp"
#include "library_modules.hpp"
#include "lua_message.hpp"
#include "memory_budget.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "meshrun/hooks/hooks.hpp"
#include "protected_call.hpp"
#include "sandbox.hpp"
#include "script_environment.hpp"

namespace meshrun {
namespace {

constexpr const char* load_hook_point = "load";

struct EnvironmentSetup {
  bool sandbox;
  const std::string* script_folder;
  const std::string* script_path;
};

// Its address is the registry key of the script's path (a light userdata
// pointing at HookScript::path_), for the panic handler.
const char script_path_key = 0;

// LuaJIT calls this for an error raised outside any protected call, then
// exits the process without a word. Nothing of meshrun's should do that,
// but if it does, the error leaves as a HookError naming the script (LuaJIT
// on x64 unwinds C++ frames, so the throw reaches the caller). Reads only:
// an allocation here would raise again.
int throw_unprotected_error(lua_State* state) {
  const auto* path = static_cast<const std::string*>(hooks_detail::registry_pointer(state, &script_path_key));
  std::string message = "internal error: a Lua error outside a protected call";
  if (lua_type(state, -1) == LUA_TSTRING) message += std::string(": ") + lua_tostring(state, -1);
  throw HookError(path != nullptr ? *path : std::string("(hook script)"), 0, "internal",
                  std::move(message), "");
}

// Run through lua_cpcall: opening the libraries and building the sandbox
// allocate, and an unprotected Lua error would abort the process.
int set_up_environment(lua_State* state) {
  const auto* setup = static_cast<const EnvironmentSetup*>(lua_touserdata(state, 1));
  lua_pushlightuserdata(state, const_cast<char*>(&script_path_key));
  lua_pushlightuserdata(state, const_cast<std::string*>(setup->script_path));
  lua_rawset(state, LUA_REGISTRYINDEX);
  hooks_detail::prepare_call_limit_slots(state);
  luaL_openlibs(state);
  // Before the sandbox and before the script, while the globals and the
  // real ffi are still the state's own.
  hooks_detail::install_batch_runtime(state);
  hooks_detail::preload_library_modules(state);
  if (setup->sandbox) {
    hooks_detail::push_sandbox_environment(state, *setup->script_folder);
  } else {
    lua_pushvalue(state, LUA_GLOBALSINDEX);
  }
  hooks_detail::record_environment(state);
  return 0;
}

std::string pop_message(lua_State* state) {
  size_t length = 0;
  const char* text = lua_tolstring(state, -1, &length);
  std::string message = text != nullptr ? std::string(text, length) : std::string("unknown error");
  lua_pop(state, 1);
  return message;
}

HookError load_error(const std::string& path, std::string message) {
  return HookError(path, 0, load_hook_point, std::move(message), "");
}

}  // namespace

HookOptions hook_options_of(const HooksConfig& hooks) {
  HookOptions options;
  options.sandbox = hooks.sandbox;
  options.instruction_limit = hooks.instruction_limit;
  options.wall_seconds = hooks.timeout_s;
  options.memory_limit_mb = hooks.memory_limit_mb;
  return options;
}

HookScript::HookScript(std::string path, HookOptions options)
    : path_(std::move(path)), options_(options) {}

HookScript::~HookScript() {
  if (state_ != nullptr) lua_close(state_);
}

std::unique_ptr<HookScript> HookScript::load(const std::string& path, const HookOptions& options) {
  namespace fs = std::filesystem;
  std::error_code error;
  // status() reports a missing file as an error, in the system's words.
  const fs::file_status status = fs::status(path, error);
  if (error) throw load_error(path, "cannot open " + path + ": " + error.message());
  if (fs::is_directory(status)) {
    throw load_error(path, "cannot open " + path + ": it is a folder, not a script");
  }
  const std::string folder = fs::canonical(fs::absolute(path).parent_path(), error).string();
  if (error) {
    throw load_error(path, "cannot resolve the folder of " + path + ": " + error.message());
  }

  std::unique_ptr<HookScript> script(new HookScript(path, options));
  const long long limit_mb = std::max(options.memory_limit_mb, 0LL);
  script->budget_ = std::make_unique<hooks_detail::MemoryBudget>(
      static_cast<std::size_t>(std::min(limit_mb, 1LL << 30)) << 20);
  lua_State* state = lua_newstate(&hooks_detail::MemoryBudget::allocate, script->budget_.get());
  if (state == nullptr) throw load_error(path, "cannot create a Lua state (out of memory)");
  script->state_ = state;
  lua_atpanic(state, throw_unprotected_error);

  EnvironmentSetup setup{options.sandbox, &folder, &script->path_};
  if (lua_cpcall(state, set_up_environment, &setup) != 0) {
    throw load_error(path, "cannot set up the script environment: " + pop_message(state));
  }
  // The count hook never runs inside JIT-compiled traces, so a sandboxed
  // script is interpreted throughout for its instruction limit to hold. Only
  // after luaL_openlibs: opening the jit library turns the engine on.
  if (options.sandbox) luaJIT_setmode(state, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);

  if (luaL_loadfilex(state, path.c_str(), options.sandbox ? "t" : "bt") != 0) {
    std::string message = pop_message(state);
    if (options.sandbox && message == "attempt to load chunk with wrong mode") {
      message =
          "sandbox: a precompiled (bytecode) script is not allowed (set [hooks] sandbox = false to "
          "lift it)";
    }
    throw hooks_detail::make_hook_error(path, load_hook_point, message, "");
  }
  if (options.sandbox) {
    hooks_detail::push_environment(state);
    lua_setfenv(state, -2);
  }

  std::string message;
  std::string traceback;
  if (hooks_detail::protected_call(state, 0, 1, options, message, traceback) != 0) {
    throw hooks_detail::make_hook_error(path, load_hook_point, message, std::move(traceback));
  }
  hooks_detail::record_exports(state);
  return script;
}

bool HookScript::has_function(std::string_view name) const {
  if (!hooks_detail::push_script_function(state_, name)) return false;
  lua_pop(state_, 1);
  return true;
}

std::vector<std::string> HookScript::function_names() const {
  return hooks_detail::script_function_names(state_);
}

}  // namespace meshrun
