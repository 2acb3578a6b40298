// Internal to the hooks subsystem: the allocator of every hook script's Lua
// state, which holds the state to `[hooks] memory_limit_mb`.
//
// The budget counts every byte the state holds, garbage included until the
// collector frees it. It is enforced only while script code runs (a
// CallLimits is armed): then a request past the limit is refused and Lua
// raises its memory error, which protected_call reports as "memory limit of N
// MiB exceeded" at the script line the count hook last saw. Outside calls,
// meshrun's own code passing arguments and reading results is never refused,
// since an unprotected allocation failure would abort the process.
// LuaJIT frees no garbage when an allocation fails, so the count hook runs a
// full collection each time the state passes `collect_at`, halfway between
// what survived the last one and the limit: a script whose live data fits
// is not refused because of garbage it left.
#pragma once

#include <cstddef>

struct lua_State;

namespace meshrun::hooks_detail {

class MemoryBudget {
 public:
  // limit_bytes == 0: no limit (still counted).
  explicit MemoryBudget(std::size_t limit_bytes);

  // The lua_Alloc of the state; `budget` is this object.
  static void* allocate(void* budget, void* block, std::size_t old_size, std::size_t new_size);
  // The budget of a state created with `allocate`, else nullptr.
  static MemoryBudget* of(lua_State* state);

  std::size_t limit() const { return limit_; }
  std::size_t used() const { return used_; }
  // Returns the previous setting.
  bool set_enforcing(bool enforcing);
  // Whether a request was refused since the last clear_refused().
  bool refused() const { return refused_bytes_ != 0; }
  std::size_t refused_bytes() const { return refused_bytes_; }
  void clear_refused() { refused_bytes_ = 0; }

  // Called by the count hook: runs a full collection when due.
  void collect_if_due(lua_State* state);

 private:
  std::size_t limit_;
  std::size_t used_ = 0;
  std::size_t collect_at_;
  std::size_t refused_bytes_ = 0;
  bool enforcing_ = false;
};

}  // namespace meshrun::hooks_detail
