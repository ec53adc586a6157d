#!/usr/bin/python3
"""Sweep wall time: `headroom ablate --jobs N` against `--jobs 1` on the same grid.

    /usr/bin/python3 bench/sweep_jobs.py

Runs the same 12-run sweep (tiny's model: d_model 64, 2 layers, T 32, batch 16; head
counts 1, 2, 4, 8 under --dk auto, 3 seeds) with --jobs 1 and with --jobs N,
alternating, each into a fresh directory, --reps times, and times each whole
command from start to exit: planning, every run, and the reports (results.csv,
summary, plots, HTML). It checks that both wrote the same results (every column of
results.csv but the timing ones) and prints a Markdown table of the medians and
their ratio, N jobs over 1. Exit status 1 when the results differ or a run failed,
2 for a usage error.
"""

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The grid: tiny's model (bench/compare.py) on the sort task, 12 runs.
GRID = ["--task", "sort", "--vocab", "64", "--seq-len", "32", "--d-model", "64", "--layers", "2",
        "--batch", "16", "--heads", "1,2,4,8", "--dk", "auto", "--seeds", "3"]
# results.csv columns that depend on the machine's speed, not on the runs' arithmetic.
TIMING_COLUMNS = ("wall_s", "tokens_per_s", "ms_per_step", "seconds")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=2, help="jobs to compare with one (default 2)")
    p.add_argument("--steps", type=int, default=300, help="training steps per run (default 300)")
    p.add_argument("--reps", type=int, default=3, help="alternating runs of each (default 3)")
    p.add_argument("--headroom", default="build/headroom", help="the headroom binary (default build/headroom)")
    a = p.parse_args()
    if a.jobs < 2:
        p.error(f"--jobs must be >= 2 (jobs to compare with one), got {a.jobs}")
    for flag in ("steps", "reps"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag} must be >= 1, got {getattr(a, flag)}")
    if not Path(a.headroom).is_file():
        p.error(f"{a.headroom} not found; build it with `cmake -S . -B build && cmake --build build -j2`, "
                f"or pass --headroom")
    return a


def results_without_timing(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in row.items() if not any(t in k for t in TIMING_COLUMNS)} for row in rows]


def run_sweep(a, jobs, out):
    cmd = [a.headroom, "ablate", *GRID, "--steps", str(a.steps), "--eval-every", str(a.steps),
           "--jobs", str(jobs), "-q", "--out", str(out)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        sys.exit(f"sweep_jobs: `{' '.join(cmd)}` failed with exit status {proc.returncode}")
    return wall, results_without_timing(out / "results.csv")


def main():
    a = parse_args()
    load_before = os.getloadavg()
    started = time.time()
    walls = {1: [], a.jobs: []}
    reference = None
    with tempfile.TemporaryDirectory(prefix="sweep_jobs.") as tmp:
        for rep in range(a.reps):
            for jobs in walls:
                out = Path(tmp) / f"jobs{jobs}-rep{rep + 1}"
                wall, results = run_sweep(a, jobs, out)
                shutil.rmtree(out)
                if reference is None:
                    reference = results
                elif results != reference:
                    sys.exit(f"sweep_jobs: --jobs {jobs} (rep {rep + 1}) wrote other results than the first sweep")
                walls[jobs].append(wall)
                print(f"rep {rep + 1}/{a.reps} --jobs {jobs}: {wall:.2f} s", file=sys.stderr, flush=True)
    one, many = walls[1], walls[a.jobs]
    paired = [m / o for o, m in zip(one, many)]
    load_after = os.getloadavg()
    print(f"`headroom ablate` on a 12-run tiny grid ({' '.join(GRID)} --steps {a.steps}), whole command "
          f"wall time, median over {a.reps} alternating runs, min-max in brackets. {os.cpu_count()} cores; load "
          f"average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after; {time.time() - started:.0f} s "
          f"in all. The results (results.csv minus timing) were the same in every run.")
    print()
    print(f"| --jobs 1 s | --jobs {a.jobs} s | ratio {a.jobs} jobs / 1 | paired ratio |")
    print("|---:|---:|---:|---:|")
    print(f"| {statistics.median(one):.2f} ({min(one):.2f}-{max(one):.2f}) "
          f"| {statistics.median(many):.2f} ({min(many):.2f}-{max(many):.2f}) "
          f"| **{statistics.median(many) / statistics.median(one):.2f}** "
          f"| {statistics.median(paired):.2f} ({min(paired):.2f}-{max(paired):.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
