// keep_freed_host_memory: after it, a repeated pattern of large allocations
// reuses the heap instead of faulting its pages in again every time.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "test_program_paths.hpp"

namespace {

long last_round_faults(const std::string& mode) {
  const std::string command = std::string(MESHRUN_HEAP_FAULTS_PROGRAM) + " " + mode;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  long faults = -1;
  const int read = std::fscanf(pipe, "%ld", &faults);
  REQUIRE(::pclose(pipe) == 0);
  REQUIRE(read == 1);
  return faults;
}

// Under AddressSanitizer malloc is ASan's own (quarantine, no mallopt), so
// there is no glibc heap to tune: scripts/sanitize.sh skips this case.
#ifdef __SANITIZE_ADDRESS__
constexpr bool kGlibcMallocReplaced = true;
#else
constexpr bool kGlibcMallocReplaced = false;
#endif

}  // namespace

TEST_CASE("freed activation-sized blocks are reused without page faults once the heap keeps them" *
          doctest::skip(kGlibcMallocReplaced)) {
  constexpr long kPagesPerRound = 3 * (24L << 20) / 4096;
  // glibc's defaults: every round maps (or grows the heap) and faults again.
  CHECK(last_round_faults("default") > kPagesPerRound / 2);
  CHECK(last_round_faults("kept") < kPagesPerRound / 100);
}
