// Internal to the hooks subsystem: a HookBatch handed to Lua for one call.
// OpenBatch checks the batch, builds the batch object through the trusted
// runtime (batch_runtime.lua) and, when closed or destroyed, invalidates
// every view of it, so a script that kept one reads no memory afterwards.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "hook_call.hpp"
#include "meshrun/hooks/hook_batch.hpp"

namespace meshrun::hooks_detail {

enum class BatchAccess {
  read_only,   // every array read-only, batch:drop refused (reward)
  rewritable,  // writable arrays assignable, batch:drop allowed (on_rollout)
};

// Pushes a JSON value as a Lua value (null as nil, objects and arrays as
// tables); false when it nests deeper than kMaxLabelDepth (the stack is
// then left with partial values the caller drops). Call it protected.
bool push_json(lua_State* state, const nlohmann::json& value, int depth);

// The type's name in batch_runtime.lua; nullptr for a value outside the enum.
const char* element_type_name(HookArrayType type);

// Throws std::invalid_argument when names, shapes, pointers or the size
// break the rules of hook_batch.hpp.
void check_hook_batch(const HookBatch& batch);

class OpenBatch {
 public:
  // Checks the batch (check_hook_batch) and opens it. `batch` must outlive
  // this object.
  OpenBatch(const HookScript& script, std::string_view hook_point, const HookBatch& batch,
            BatchAccess access);
  // Closes the batch if close() was not called; never throws.
  ~OpenBatch();
  OpenBatch(const OpenBatch&) = delete;
  OpenBatch& operator=(const OpenBatch&) = delete;

  void push() const;  // the batch object, for the hook's argument
  // Invalidates the views; returns the samples the hook dropped, 0-based and
  // in order. Call once.
  std::vector<int64_t> close();
  bool closed() const { return closed_; }
  // After close(): the last sample (1-based) the hook read a text, label or
  // matrix row of; 0 when none.
  int64_t last_sample() const { return last_sample_; }

 private:
  const HookScript& script_;
  std::string hook_point_;
  RegistryValue batch_object_;
  bool closed_ = false;
  int64_t last_sample_ = 0;
};

// `error` with the sample the hook was at when it ran out of instructions
// or time (closing `open` to learn it); other errors as they are.
HookError with_last_sample(const HookError& error, OpenBatch& open, int64_t size);

}  // namespace meshrun::hooks_detail
