// Precompiled header of the torch-heavy targets: the LibTorch headers every
// file of src/dist (and later src/model, src/train) includes. Only headers
// that are stable and slow to parse belong here.
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
