#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  // Hub names resolve in a cache no test fills unless it names its own: the
  // machine's real ~/.cache/huggingface must not change any result (child
  // processes inherit this too).
  setenv("HF_HUB_CACHE", "/nonexistent/meshrun-tests/hub", 1);
  doctest::Context context(argc, argv);
  return context.run();
}
