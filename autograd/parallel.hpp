// Threads for headroom's own loops, beside the GEMM library's.
//
// set_threads(n) is the one knob (the trainer's --threads). A training step on n
// threads runs n shards of its batch as n tasks (train/step.cpp), each with its ops
// serial inside; outside them, and for a batch of one row, parallel_for splits
// headroom's loops (attention per (batch, kv head), LayerNorm and GELU rows, the
// optimizer's parameters) into up to kChunksPerThread * n contiguous chunks, and the
// caller's thread and n - 1 workers claim them one by one, each its own share of
// the chunks first (the same rows in every loop, so data stays in the core's cache)
// and then what the others have not claimed yet; gemm() splits a large
// GEMM into panels of C the same way (gemm.hpp). Chunks are fixed by n and the
// loop's length alone, and each is computed the same way whichever thread claims
// it, so a run is deterministic for a given n. Claiming instead of assigning is
// what keeps n threads useful on a shared machine: a thread whose core is busy
// with another process takes fewer chunks (docs/design.md#threads).
//
// Inside a chunk, parallel_for runs nested loops serially, and gemm() runs on one
// thread (BLIS: a per-call thread count; OpenBLAS has none, so with OpenBLAS the
// loops that call gemm() stay on the caller's thread: see gemm_threads_per_call()).
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <vector>

namespace headroom {

// Threads for parallel_for on the calling thread, and for the GEMM library; at
// least 1. The loops' threads belong to the thread that called it (each job of
// `headroom ablate --jobs` trains on its own), the GEMM library's count is
// process-wide. Call it between steps, not from inside a parallel_for.
void set_threads(int threads);
int threads();  // the calling thread's

// Runs body(begin, end) over contiguous chunks that cover [0, n), parallel_chunks()
// of them, in parallel, and returns when all are done. The first exception a chunk throws is rethrown
// here after every chunk finished. calls_gemm: the body calls gemm(); such loops
// stay serial when the GEMM library cannot run one call on one thread.
void parallel_for(std::size_t n, std::size_t min_chunk, const std::function<void(std::size_t, std::size_t)>& body,
                  bool calls_gemm = false);

// Runs every task once. With no more threads than tasks, as the chunks of one
// parallel_for, each task on one thread (a gemm() inside runs unsplit); with more
// threads, one after the other, each free to use every thread itself. For
// independent products of equal size, such as a linear layer's two gradient
// GEMMs, a whole product per thread beats splitting each: no operand is packed
// twice and the threads meet once instead of twice.
void parallel_tasks(const std::vector<std::function<void()>>& tasks);

// Chunks per thread: enough that a thread slowed by another process can hand most
// of its share to the others, few enough that each still pays for its claim.
inline constexpr std::size_t kChunksPerThread = 2;

// The chunks parallel_for(n, min_chunk, ..., calls_gemm) makes on this thread: at
// most kChunksPerThread * threads(), none shorter than min_chunk (unless n is), 1
// inside a chunk or on one thread, 0 for n == 0.
std::size_t parallel_chunks(std::size_t n, std::size_t min_chunk, bool calls_gemm = false);

// headroom's loops hand parallel_for chunks of at least this many elements: below
// it, waking a thread costs more than the work.
inline constexpr std::size_t kMinChunkElements = 16384;

// The fewest rows of `width` elements that make such a chunk (at least one row).
inline std::size_t min_chunk_rows(std::size_t width) {
  return std::max<std::size_t>(1, kMinChunkElements / std::max<std::size_t>(width, 1));
}

// How the calling thread's loops of more than one chunk ran while it had workers:
// shared with them, or kept on this thread because sharing did not pay: loops too
// short for a second thread, or a core busy with another process (parallel.cpp,
// docs/design.md#threads). lost_ms: what the shared loops that lost cost, against
// the estimate of running them alone. Where their time went: shared_ms, the shared
// loops' wall time; busy_ms, the time every thread spent inside their chunks, summed
// over the threads, so that threads() * shared_ms - busy_ms is the thread time spent
// waiting in them (for a worker to wake and claim, or for the last chunk); kept_ms,
// the kept loops' wall time, one thread's. Counts since set_threads first gave this
// thread workers; set_threads(1) drops them.
struct ParallelStats {
  std::size_t shared = 0, kept = 0;
  double lost_ms = 0;
  double shared_ms = 0, busy_ms = 0, kept_ms = 0;
};
ParallelStats parallel_stats();

// Each thread beyond the first pays for itself only when a training step has about
// this many FLOPs of matrix products to share: below it, waking threads and moving
// each op's data between the cores' caches cost more than the second core saves:
// the tiny config's step, below it, runs slower on two threads than on one, and
// steps of twice it and more run faster (bench/README.md).
inline constexpr double kFlopsPerExtraThread = 5e8;

// The threads that pay for steps of `step_flops`: `requested`, capped at 1 +
// step_flops / flops_per_extra_thread (at least 1). A training step cut into one
// shard of its batch per thread pays from fewer FLOPs (train/step.hpp,
// kFlopsPerExtraShard).
int threads_that_pay(int requested, double step_flops, double flops_per_extra_thread = kFlopsPerExtraThread);

// Whether this thread is running a chunk of a parallel_for with more than one chunk
// (gemm() then runs single-threaded).
bool in_parallel_region();

}  // namespace headroom
