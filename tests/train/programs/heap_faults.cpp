// Prints the page faults of the last of four rounds of allocating, touching
// and freeing three 24 MiB blocks (a training step's activations in
// miniature), with the heap as glibc leaves it ("default") or after
// keep_freed_host_memory() ("kept"). Used by host_memory_test.cpp.
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "src/train/host_memory.hpp"

namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "default" && mode != "kept") {
    std::fprintf(stderr, "usage: heap_faults default|kept\n");
    return 2;
  }
  if (mode == "kept") meshrun::train_detail::keep_freed_host_memory();
  constexpr size_t kBlock = size_t{24} << 20;
  long faults = 0;
  for (int round = 0; round < 4; ++round) {
    const long before = minor_faults();
    void* blocks[3];
    for (void*& block : blocks) {
      block = std::malloc(kBlock);
      if (!block) return 1;
      std::memset(block, round + 1, kBlock);
    }
    for (void* block : blocks) std::free(block);
    faults = minor_faults() - before;
  }
  std::printf("%ld\n", faults);
  return 0;
}
