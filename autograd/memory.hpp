// Process-wide allocator settings for training loops.
//
// Every op allocates its output, and the tape holds them until backward, so a
// training step allocates and frees the same large buffers again and again. glibc
// serves big requests with mmap and returns freed memory at the top of the heap to
// the OS, so each step faults the same pages back in, a time spent in the kernel
// that grows with the model. retain_freed_memory() keeps such buffers in the heap
// for the next step instead.
#pragma once

namespace headroom {

// Serve allocations up to 32 MiB (glibc's maximum) from the heap instead of mmap,
// return freed heap memory to the OS only beyond 1 GiB at its top, and keep the
// heaps of other threads' arenas (a training step's second shard runs on another
// thread, train/step.cpp) instead of unmapping them when they empty; the settings
// hold for every thread, also those started before. Safe to call more than once;
// returns false when the C library refused the settings (not glibc).
bool retain_freed_memory();

}  // namespace headroom
