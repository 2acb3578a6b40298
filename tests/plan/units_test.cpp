// How sizes and counts are written for people.
#include <doctest/doctest.h>

#include "src/plan/units.hpp"

using namespace meshrun::plan_detail;

TEST_CASE("bytes as GiB with two decimals") {
  CHECK(gib_text(0) == "0.00");
  CHECK(gib_text(int64_t{80} << 30) == "80.00");
  CHECK(gib_text(146'541'133'824) == "136.48");
  CHECK(gib_text(-(int64_t{1} << 29)) == "-0.50");
}

TEST_CASE("parameter counts with a suffix") {
  CHECK(parameter_count_text(68'976'648'192) == "68.98B");
  CHECK(parameter_count_text(494'032'768) == "494.03M");
  CHECK(parameter_count_text(108'864) == "108.86K");
  CHECK(parameter_count_text(950) == "950");
}
