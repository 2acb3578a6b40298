// How many intra-op threads a training process uses. Internal to src/train.
#pragma once

#include "meshrun/launch/env.hpp"

namespace meshrun::train_detail {

// The machine's cores shared out among the processes of this node (at
// least one each), unless OMP_NUM_THREADS or MESHRUN_THREADS says
// otherwise: LibTorch would otherwise start one thread per core in every
// process, and local_world_size processes would fight over the cores.
int training_threads(const LaunchInfo& launch, const Environment& environment, unsigned hardware_threads);
void set_training_threads(const LaunchInfo& launch);

}  // namespace meshrun::train_detail
