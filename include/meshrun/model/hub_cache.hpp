// Moved: the hub cache is include/meshrun/arch/hub_cache.hpp (arch/: what a
// model is without its tensors, on the floor below plan/). This forwarder
// keeps the includes of src/data and src/train building until they name
// the new path; include that instead.
#pragma once

#include "meshrun/arch/hub_cache.hpp"
