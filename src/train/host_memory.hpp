// How a training process's C heap treats freed host memory. Internal to
// src/train.
//
// Every training step allocates and frees the same activation tensors.
// glibc by default hands blocks above a moving threshold (up to 32 MiB)
// back to the kernel with munmap, and trims the heap top once more than
// twice that is free, so the next step takes a page fault and a zeroed
// page for every 4 KiB of them again: measured 55-80 k faults and 0.1-0.2 s
// of system time per step of the 23.5 M-parameter benchmark model. Keeping
// freed memory in the heap makes later steps fault-free; the process keeps
// its peak footprint, which a training step reaches every step anyway.
#pragma once

namespace meshrun::train_detail {

// Serves blocks up to 32 MiB (glibc's largest mmap threshold) from the heap
// and never trims it. Once per process; a no-op without glibc.
void keep_freed_host_memory();

}  // namespace meshrun::train_detail
