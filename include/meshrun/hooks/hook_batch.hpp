// Passing rollout batches to Lua hooks, and the three hook points that
// take them: reward(batch), on_rollout(batch) and on_step(step, metrics).
//
// A HookBatch describes memory the caller owns; nothing is copied. The hook
// sees `batch.<name>` as a view over each HookArray (LuaJIT FFI pointers,
// 1-based, bounds-checked on every access), `batch:prompt_text(i)` and
// `batch:response_text(i)` decoded only when asked, `batch:label(i)` the
// sample's label as a Lua value (strings, numbers and booleans as they are,
// objects and arrays as tables, JSON null and a missing label as nil), and
// each extra field as a number. The views are valid only while the hook runs: afterwards every
// use raises "batch used after its hook returned", so a view a script kept
// in a global never reads freed memory. The caller's arrays must stay alive
// and unmoved for the duration of the call.
//
// Only on_rollout may change the batch: it writes through arrays marked
// writable and drops samples with batch:drop(i). reward sees every array
// read-only, whatever its writable flag.
//
// Every call runs protected under the script's limits (instruction count,
// wall clock; see hooks.hpp). A Lua error, an exceeded limit, a missing
// function or a result of the wrong shape is thrown as a HookError whose
// hook point is the function's name. A HookBatch that breaks the rules
// below (bad names, shapes or pointers) is a programming error of the
// caller: std::logic_error, before any Lua code runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "meshrun/hooks/hooks.hpp"

namespace meshrun {

// Element types. uint8 holds 0/1 flags (masks): Lua reads them as false/true
// and writes booleans. int64 elements are read as Lua numbers (doubles), so
// values beyond 2^53 lose precision.
enum class HookArrayType { int32, int64, float32, float64, uint8 };

struct HookArray {
  std::string name;  // a Lua identifier, unique in the batch: batch.<name>
  HookArrayType type = HookArrayType::float32;
  void* data = nullptr;        // may be null only when the array has no elements
  std::vector<int64_t> shape;  // {n} or {rows, cols}, row-major, no negative sizes
  bool writable = false;       // on_rollout may assign elements
};

inline constexpr int kMaxLabelDepth = 64;

struct HookBatch {
  int64_t size = 0;  // samples: batch.size, and the count reward must return
  std::vector<HookArray> arrays;
  // 0-based sample index -> text; either may be empty (the hook is told the
  // text is not available). Called at most once per sample and call.
  std::function<std::string(int64_t sample)> prompt_text;
  std::function<std::string(int64_t sample)> response_text;
  // 0-based sample index -> its label, or null when it has none; empty:
  // batch:label(i) is nil for every sample. Labels nested deeper than
  // kMaxLabelDepth are refused (a hook error naming the sample).
  std::function<const nlohmann::json*(int64_t sample)> label;
  // Extra numbers exposed as batch.<name> (step, n_samples_per_prompt, ...);
  // names follow the same rules as array names.
  std::vector<std::pair<std::string, double>> fields;
};

// Calls function(batch); it must return a table of exactly batch.size finite
// numbers, one per sample in order.
std::vector<double> call_reward_hook(HookScript& script, std::string_view function,
                                     const HookBatch& batch);

// Calls function(batch); the hook may rewrite writable arrays in place,
// drop samples with batch:drop(i), and return nil or a table of batch.size
// booleans (false drops the sample). Returns one keep flag per sample.
std::vector<bool> call_on_rollout_hook(HookScript& script, std::string_view function,
                                       HookBatch& batch);

// Calls function(step, metrics) with metrics as a table name -> number; the
// hook may return nil or a table of extra metrics, string names to finite
// numbers or booleans (1/0). Returns them sorted by name.
std::vector<std::pair<std::string, double>> call_on_step_hook(
    HookScript& script, std::string_view function, int64_t step,
    const std::vector<std::pair<std::string, double>>& metrics);

}  // namespace meshrun
