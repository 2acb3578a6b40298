// Precompiled header of the unit tests that include LibTorch
// (torch_test_sources in tests/meson.build): the product's torch headers
// (src/dist/pch/torch_pch.hpp) and then doctest the way every such test
// includes it (tests/dist/torch_doctest.hpp: c10's CHECK macros dropped,
// doctest's defined last). Parsing these once instead of in each of some
// thirty tests halves their compile time (docs/benchmarks.md, build time).
#pragma once

#include "../../src/dist/pch/torch_pch.hpp"
#include "../dist/torch_doctest.hpp"
