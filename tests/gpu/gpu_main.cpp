// The gpu suite's unit tests: their own program, so that on a machine with
// no visible GPU (or a build without CUDA) the suite reports "skipped"
// (exit 77) instead of passing without having run.
#define DOCTEST_CONFIG_IMPLEMENT
#include "tests/dist/torch_doctest.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::printf("gpu suite: no CUDA device visible (or a build without CUDA): skipped\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
