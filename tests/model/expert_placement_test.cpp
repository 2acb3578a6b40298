// Expert parallelism's placement: which experts an ep rank holds, and which
// expert a peer holds at the same place (the full state's gather).
#include <doctest/doctest.h>

#include "meshrun/model/expert_placement.hpp"

namespace meshrun {
namespace {

TEST_CASE("8 experts over 4 ep ranks: two consecutive experts each") {
  const ExpertPlacement placement{8, 4};
  CHECK(placement.even());
  CHECK(placement.held() == 2);
  CHECK(placement.first_of(0) == 0);
  CHECK(placement.first_of(3) == 6);
  CHECK(placement.holds(1, 2));
  CHECK(placement.holds(1, 3));
  CHECK_FALSE(placement.holds(1, 4));
  CHECK_FALSE(placement.holds(0, 2));
  // Rank 1's second expert (3) sits where rank 0 holds 1 and rank 3 holds 7.
  CHECK(placement.at_peer(1, 3, 0) == 1);
  CHECK(placement.at_peer(1, 3, 3) == 7);
  CHECK(placement.at_peer(1, 3, 1) == 3);
  for (int rank = 0; rank < 4; ++rank)
    for (int expert = placement.first_of(rank); expert < placement.first_of(rank + 1); ++expert)
      for (int peer = 0; peer < 4; ++peer) CHECK(placement.holds(peer, placement.at_peer(rank, expert, peer)));
}

TEST_CASE("experts that do not split evenly are held by no rank") {
  const ExpertPlacement placement{6, 4};
  CHECK_FALSE(placement.even());
  for (int expert = 0; expert < 6; ++expert) CHECK_FALSE(placement.holds(expert / 2, expert));
  CHECK(ExpertPlacement{4, 1}.holds(0, 3));
}

}  // namespace
}  // namespace meshrun
