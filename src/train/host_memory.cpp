// Heap settings for training processes (host_memory.hpp).
#include "host_memory.hpp"

#include <cstddef>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace meshrun::train_detail {

void keep_freed_host_memory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    constexpr int kLargestMmapThreshold = 32 << 20;  // glibc refuses more on 64-bit
    mallopt(M_MMAP_THRESHOLD, kLargestMmapThreshold);
    mallopt(M_TRIM_THRESHOLD, -1);  // (size_t) -1: never trim
  });
#endif
}

}  // namespace meshrun::train_detail
