// Where expert parallelism puts a mixture's experts: ep rank r of `ranks`
// holds the held() = experts / ranks consecutive experts from r × held().
// Every place that maps between a rank's local experts and global indices
// (the model's init, the full state's gather, the engine's checks) reads it
// from here, so they cannot disagree. Plain integers: no tensors.
#pragma once

namespace meshrun {

struct ExpertPlacement {
  int experts = 0;  // in the layer
  int ranks = 1;    // the ep group's size

  // Whether the experts split evenly (lint's mesh.ep-experts makes it so).
  bool even() const { return ranks > 0 && experts % ranks == 0; }
  int held() const { return experts / ranks; }
  int first_of(int rank) const { return rank * held(); }
  bool holds(int rank, int expert) const { return even() && expert / held() == rank; }
  // The expert ep rank `peer` holds at the place where `rank` holds `expert`.
  int at_peer(int rank, int expert, int peer) const { return first_of(peer) + expert - first_of(rank); }
};

}  // namespace meshrun
