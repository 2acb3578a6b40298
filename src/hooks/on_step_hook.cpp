// The on_step hook point: on_step(step, metrics) after each training step,
// returning nil or extra metrics.
#include <algorithm>
#include <cmath>
#include <lua.hpp>
#include <string>
#include <utf8proc.h>

#include "hook_call.hpp"
#include "meshrun/hooks/hook_batch.hpp"

namespace meshrun {
namespace {

using hooks_detail::describe_type;
using hooks_detail::throw_bad_result;
using Metrics = std::vector<std::pair<std::string, double>>;

// Run under lua_cpcall (build_protected): pushes the metrics table.
void push_metrics(lua_State* state, const void* context) {
  const auto& metrics = *static_cast<const Metrics*>(context);
  lua_createtable(state, 0, static_cast<int>(metrics.size()));
  for (const auto& [name, value] : metrics) {
    lua_pushlstring(state, name.data(), name.size());
    lua_pushnumber(state, value);
    lua_rawset(state, -3);
  }
}

// Why `name` cannot be an extra metric, or empty when it can. The step's
// row holds the built-in metrics and "step" itself: an extra metric of the
// same name would silently replace the real value (or lose the row).
std::string refusal_of_metric_name(const std::string& name, const Metrics& built_in) {
  if (name.empty()) return "an empty name";
  if (name == "step") return "the name 'step', which is the row's own key";
  if (name == "time") return "the name 'time', which is the row's own key (its wall-clock time)";
  // metrics.jsonl and TensorBoard's tags are UTF-8.
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(name.data());
  for (size_t at = 0; at < name.size();) {
    utf8proc_int32_t code = 0;
    const utf8proc_ssize_t length = utf8proc_iterate(bytes + at, static_cast<utf8proc_ssize_t>(name.size() - at), &code);
    if (length <= 0) return "a name that is not valid UTF-8 (byte " + std::to_string(at) + ")";
    at += static_cast<size_t>(length);
  }
  const bool taken = std::any_of(built_in.begin(), built_in.end(),
                                 [&name](const auto& metric) { return metric.first == name; });
  if (taken) {
    return "the name '" + name +
           "' of a built-in metric of this step (it would replace the real value; pick another "
           "name)";
  }
  return {};
}

// The extra metrics returned on top of the stack, sorted by name.
Metrics read_extra_metrics(const HookScript& script, std::string_view hook_point, int line,
                           const Metrics& built_in) {
  lua_State* state = script.state();
  const int result = lua_gettop(state);
  Metrics extra;
  if (lua_isnil(state, result)) return extra;
  if (!lua_istable(state, result)) {
    throw_bad_result(script, hook_point, line,
                     std::string(hook_point) +
                         " must return nil or a table of metrics (name = number), got " +
                         describe_type(state, result));
  }
  lua_pushnil(state);
  while (lua_next(state, result) != 0) {
    if (lua_type(state, -2) != LUA_TSTRING) {
      throw_bad_result(script, hook_point, line,
                       std::string(hook_point) + " returned a metric under " +
                           describe_type(state, -2) + " key; metric names must be strings");
    }
    size_t length = 0;
    const char* key = lua_tolstring(state, -2, &length);  // a string already: no conversion
    std::string name(key, length);
    if (const std::string refusal = refusal_of_metric_name(name, built_in); !refusal.empty()) {
      throw_bad_result(script, hook_point, line,
                       std::string(hook_point) + " returned a metric under " + refusal);
    }
    double value = 0;
    if (lua_type(state, -1) == LUA_TBOOLEAN) {
      value = lua_toboolean(state, -1) ? 1 : 0;
    } else if (lua_type(state, -1) == LUA_TNUMBER) {
      value = lua_tonumber(state, -1);
      if (!std::isfinite(value)) {
        throw_bad_result(script, hook_point, line,
                         std::string(hook_point) + " metric '" + name + "' is " +
                             (std::isnan(value) ? "nan"
                              : value > 0       ? "inf"
                                                : "-inf"));
      }
    } else {
      throw_bad_result(script, hook_point, line,
                       std::string(hook_point) + " metric '" + name + "' is " +
                           describe_type(state, -1) + ", expected a number or a boolean");
    }
    // Each is a column of metrics.jsonl and a TensorBoard tag on every
    // step: a few hundred serve any run; 100 000 a step is a log that
    // grows without bound.
    constexpr size_t kMaxHookMetrics = 256;
    if (extra.size() == kMaxHookMetrics)
      throw_bad_result(script, hook_point, line,
                       std::string(hook_point) + " returned more than " + std::to_string(kMaxHookMetrics) +
                           " metrics; at most " + std::to_string(kMaxHookMetrics) + " a step are logged");
    extra.emplace_back(std::move(name), value);
    lua_pop(state, 1);
  }
  std::sort(extra.begin(), extra.end());
  return extra;
}

}  // namespace

Metrics call_on_step_hook(HookScript& script, std::string_view function, int64_t step,
                          const Metrics& metrics) {
  lua_State* state = script.state();
  hooks_detail::StackRestorer restore_stack(state);
  const hooks_detail::RegistryValue metrics_table(
      state, hooks_detail::build_protected(script, function, push_metrics, &metrics));
  const int line = hooks_detail::push_hook_function(script, function);
  lua_pushnumber(state, static_cast<lua_Number>(step));
  metrics_table.push();
  hooks_detail::call_hook(script, function, 2);
  return read_extra_metrics(script, function, line, metrics);
}

}  // namespace meshrun
