#include "memory_budget.hpp"

#include <algorithm>
#include <cstdlib>
#include <lua.hpp>

namespace meshrun::hooks_detail {
namespace {

// Below this, a collection would free too little to be worth its time.
constexpr std::size_t kLeastCollectionStep = std::size_t{1} << 20;

}  // namespace

MemoryBudget::MemoryBudget(std::size_t limit_bytes)
    : limit_(limit_bytes), collect_at_(std::max(limit_bytes / 2, kLeastCollectionStep)) {}

void* MemoryBudget::allocate(void* budget_pointer, void* block, std::size_t old_size,
                             std::size_t new_size) {
  auto* budget = static_cast<MemoryBudget*>(budget_pointer);
  // Lua passes the block's old size only when block is not null.
  if (block == nullptr) old_size = 0;
  if (new_size == 0) {
    std::free(block);
    budget->used_ -= old_size;
    return nullptr;
  }
  if (budget->enforcing_ && budget->limit_ != 0 && new_size > old_size &&
      budget->used_ - old_size + new_size > budget->limit_) {
    budget->refused_bytes_ = new_size;
    return nullptr;  // Lua raises its memory error; the block, if any, stays valid
  }
  void* resized = std::realloc(block, new_size);
  if (resized == nullptr) return nullptr;
  budget->used_ = budget->used_ - old_size + new_size;
  return resized;
}

MemoryBudget* MemoryBudget::of(lua_State* state) {
  void* budget = nullptr;
  if (lua_getallocf(state, &budget) != &MemoryBudget::allocate) return nullptr;
  return static_cast<MemoryBudget*>(budget);
}

bool MemoryBudget::set_enforcing(bool enforcing) {
  const bool previous = enforcing_;
  enforcing_ = enforcing;
  return previous;
}

void MemoryBudget::collect_if_due(lua_State* state) {
  if (limit_ == 0 || used_ < collect_at_) return;
  lua_gc(state, LUA_GCCOLLECT, 0);
  collect_at_ = used_ + std::max((limit_ > used_ ? limit_ - used_ : 0) / 2, kLeastCollectionStep);
}

}  // namespace meshrun::hooks_detail
