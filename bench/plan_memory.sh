#!/usr/bin/env bash
# What planning an ablate grid takes per run (ablate/sweep.hpp, kPlanBytesPerRun):
# `headroom ablate` over grids of N and 2N runs of a tiny task (two head counts, N/2
# and N seeds; a sweep takes at most 10000 seeds), each stopped as soon
# as its sweep.json (the finished plan) exists, with the process's peak resident
# memory (VmHWM) read just before. The difference over N is the cost of a run of the
# plan, without the process's fixed cost.
#
#   bench/plan_memory.sh [BUILD_DIR] [N]      # defaults: build, 10000 (N even, at most 10000)
set -euo pipefail
build="${1:-build}"
n="${2:-10000}"
bin="$build/headroom"
[ -x "$bin" ] || { echo "plan_memory: $bin is not built (cmake --build $build --target headroom)" >&2; exit 1; }
tmp="$(mktemp -d /tmp/headroom-plan.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

peak_kib() {  # peak_kib RUNS: VmHWM of a planning process in KiB
  local runs="$1" out="$tmp/s$1" hwm=0
  "$bin" ablate --task copy --d-model 8 --heads 1,2 --layers 1 --steps 1 --warmup 0 --batch 2 --eval-batches 1 \
    --seeds "$((runs / 2))" --max-runs "$runs" --jobs 1 --out "$out" >/dev/null 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    local now
    now=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [ -n "$now" ] && [ "$now" -gt "$hwm" ] && hwm=$now
    if [ -e "$out/sweep.json" ]; then kill "$pid" 2>/dev/null || true; break; fi
    sleep 0.05
  done
  wait "$pid" 2>/dev/null || true
  echo "$hwm"
}

a=$(peak_kib "$n")
b=$(peak_kib "$((2 * n))")
echo "plan_memory: peak $a KiB at $n runs, $b KiB at $((2 * n)) runs: $(( (b - a) * 1024 / n )) bytes per run"
