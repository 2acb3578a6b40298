// Include first, instead of <doctest/doctest.h>, in tests that include
// LibTorch. c10's logging defines CHECK, CHECK_EQ, ... macros (glog's
// names) that abort the process and would replace doctest's assertions of
// the same names. Torch's headers come first, their macros are dropped, and
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
