// Tests of src/recipe/suggest.cpp: the edit distance and the "did you mean"
// threshold.
#include <doctest/doctest.h>

#include "meshrun/recipe/suggest.hpp"

namespace meshrun {
namespace {

TEST_CASE("edit_distance counts insertions, deletions and substitutions") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("nodes", "nodes") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("lanch", "launch") == 1);   // one insertion
  CHECK(edit_distance("launchh", "launch") == 1);  // one deletion
  CHECK(edit_distance("tp", "sp") == 1);          // one substitution
  CHECK(edit_distance("tp", "type") == 2);
  CHECK(edit_distance("kitten", "sitting") == 3);  // k→s, e→i, +g
}

TEST_CASE("edit_distance counts an adjacent transposition as one edit") {
  CHECK(edit_distance("nodse", "nodes") == 1);
  CHECK(edit_distance("ab", "ba") == 1);
  CHECK(edit_distance("bf61", "bf16") == 1);
}

TEST_CASE("edit_distance ignores case") {
  CHECK(edit_distance("NODES", "nodes") == 0);
  CHECK(edit_distance("Launch", "lAunch") == 0);
}

TEST_CASE("edit_distance is symmetric") {
  for (auto [a, b] : {std::pair{"micro_train", "micro_rollout"}, std::pair{"algoritm", "algorithm"},
                      std::pair{"x", "procs_per_node"}})
    CHECK(edit_distance(a, b) == edit_distance(b, a));
}

TEST_CASE("closest_match suggests a candidate within one edit per three characters") {
  const std::vector<std::string> launch = {"type", "nodes", "procs_per_node", "device", "backend"};
  CHECK(closest_match("nodse", launch) == "nodes");
  CHECK(closest_match("devise", launch) == "device");
  CHECK(closest_match("procs_per_nod", launch) == "procs_per_node");
  CHECK(closest_match("color", launch) == std::nullopt);

  SUBCASE("6 characters allow 2 edits, not 3") {
    CHECK(closest_match("lauxxh", {"launch"}) == "launch");
    CHECK(closest_match("lxxxch", {"launch"}) == std::nullopt);
  }
  SUBCASE("9 characters allow 3 edits, not 4") {
    CHECK(closest_match("abcdefxyz", {"abcdefghi"}) == "abcdefghi");
    CHECK(closest_match("abcdewxyz", {"abcdefghi"}) == std::nullopt);
  }
  SUBCASE("never more than 3 edits, however long the word") {
    CHECK(closest_match("abcdefghijklmXYZ", {"abcdefghijklmnop"}) == "abcdefghijklmnop");
    CHECK(closest_match("abcdefghijklWXYZ", {"abcdefghijklmnop"}) == std::nullopt);
  }
  SUBCASE("3 to 5 characters allow 1 edit") {
    CHECK(closest_match("gae", {"gaf"}) == "gaf");
    CHECK(closest_match("gae", {"gxf"}) == std::nullopt);
    CHECK(closest_match("trian", {"train"}) == "train");
    CHECK(closest_match("trxxn", {"train"}) == std::nullopt);
  }
}

TEST_CASE("closest_match does not turn a two-letter word into another") {
  const std::vector<std::string> mesh = {"tp", "sp", "dp"};
  CHECK(closest_match("pp", mesh) == std::nullopt);
  CHECK(closest_match("cp", mesh) == std::nullopt);
  CHECK(closest_match("TP", mesh) == "tp");  // case alone is not an edit
}

TEST_CASE("closest_match picks the nearest candidate, the first one on ties") {
  CHECK(closest_match("traim", {"micro_train", "train"}) == "train");
  CHECK(closest_match("ab_x", {"ab_y", "ab_z"}) == "ab_y");
  CHECK(closest_match("actr", {"critic", "actor", "ref"}) == "actor");
  CHECK(closest_match("anything", {}) == std::nullopt);
}

}  // namespace
}  // namespace meshrun
