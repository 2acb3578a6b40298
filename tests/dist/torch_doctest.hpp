// Include first, instead of <doctest/doctest.h>, in tests that include
// LibTorch. LibTorch 1.13 logs through glog, whose CHECK, CHECK_EQ, ...
// macros abort the process and would replace doctest's assertions of the
// same names. Torch's headers come first, glog's macros are dropped, and
// doctest's are defined last.
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#undef CHECK_NOTNULL

#include <doctest/doctest.h>
