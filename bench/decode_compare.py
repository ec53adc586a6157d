#!/usr/bin/python3
"""Side-by-side decoding speed: headroom (decode_bench) against PyTorch
(torch_decode.py) on the same MHA, GQA and MQA models, with and without a KV cache.

    /usr/bin/python3 bench/decode_compare.py

It runs the two alternately, each in a fresh process (headroom, torch, ... --runs
times), each timing every kv config and context length by the protocol of
decode_bench.cpp (the n = --steps tokens at contexts L - n + 1 .. L, median over
--reps reps), takes the median over runs, and prints a Markdown table per kv config
and context: cached tok/s on both sides and their ratio, uncached tok/s, the
cached/uncached speedup and the KV-cache bytes per token; beside the ratio, the same
ratio of process CPU time, steadier on a busy machine. Then the goals of issue
16, each as met or not: cached at least 10x uncached at context 256 (the medium
model), headroom's cached decode faster than torch's at every length, MQA's cache
exactly 1/h of MHA's.

Progress goes to stderr, the tables to stdout. Exit status 1 when a sanity check
failed (different parameter counts or KV bytes on the two sides, or cached logits
that differ from the full forward's by more than 1e-3), 2 for a usage error. Threads
and the BLAS library are set as bench/compare.py sets them (--torch-blas same, the
default, preloads BLIS's libblas.so.3 for torch when headroom links BLIS).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import cpu_model, linked_blas, print_table, spread, thread_env  # noqa: E402

LOGIT_TOLERANCE = 1e-3
SPEEDUP_GOAL = 10.0  # cached over uncached, at context GOAL_CONTEXT
GOAL_CONTEXT = 256


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--kv", default="mha,gqa,mqa", help="mha (G = h), gqa (G = h/4), mqa (G = 1), or a number")
    p.add_argument("--contexts", default="64,128,256,512,1024", help="context lengths L")
    p.add_argument("--steps", type=int, default=8, help="timed tokens per rep (default 8)")
    p.add_argument("--reps", type=int, default=5, help="timed reps per run (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed reps first (default 1)")
    p.add_argument("--runs", type=int, default=1, help="alternating runs of each implementation (default 1)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--build", default="build/bench", help="directory holding decode_bench (default build/bench)")
    p.add_argument("--python", default="/usr/bin/python3", help="a python3 with torch (default /usr/bin/python3)")
    p.add_argument("--json", metavar="PATH", help="also write every JSON line to PATH")
    p.add_argument("--torch-blas", choices=("same", "native"), default="same",
                   help="same: torch runs on the BLAS library headroom's benchmark links (default); "
                        "native: on the system's libblas.so.3")
    a = p.parse_args()
    for flag in ("runs", "reps", "steps", "threads"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag} must be >= 1, got {getattr(a, flag)}")
    a.bench = Path(a.build) / "decode_bench"
    if not a.bench.is_file():
        p.error(f"{a.bench} not found; build it with `cmake --build build -j2 --target decode_bench`, or pass --build")
    return a


def run_lines(cmd, env):
    """Runs one benchmark process; its JSON lines as dicts."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr)
        sys.exit(f"decode_compare: `{' '.join(map(str, cmd))}` failed with exit status {proc.returncode}")
    return lines


def main():
    a = parse_args()
    common = [str(v) for v in ["--d-model", a.d_model, "--heads", a.heads, "--layers", a.layers,
                               "--max-len", a.max_len, "--vocab", a.vocab, "--kv", a.kv, "--contexts", a.contexts,
                               "--steps", a.steps, "--reps", a.reps, "--warmup", a.warmup,
                               "--threads", a.threads, "--seed", a.seed]]
    commands = {"headroom": [str(a.bench)] + common,
                "torch": [a.python, str(HERE / "torch_decode.py")] + common}
    env = thread_env(a.threads)
    headroom_blas, blis_libblas = linked_blas(a.bench)
    torch_env = dict(env)
    torch_blas = "the system's libblas.so.3 (OpenBLAS on Debian)"
    if a.torch_blas == "same" and headroom_blas == "BLIS":
        if blis_libblas is None:
            print("decode_compare: headroom links BLIS but BLIS's libblas.so.3 is not beside it; "
                  "use --torch-blas native", file=sys.stderr)
            return 2
        torch_env["LD_PRELOAD"] = str(blis_libblas)
        torch_blas = f"BLIS ({blis_libblas}, preloaded)"
    load_before = os.getloadavg()
    started = time.time()

    results = {}  # (impl, kv, context) -> [line per run]
    all_lines = []
    order = []  # (kv, n_kv_heads, context) in headroom's order
    for run in range(a.runs):
        for impl in ("headroom", "torch"):
            t0 = time.time()
            lines = run_lines(commands[impl], env if impl == "headroom" else torch_env)
            for r in lines:
                r["run"] = run + 1
                key = (r["kv"], r["n_kv_heads"], r["context"])
                if impl == "headroom" and run == 0:
                    order.append(key)
                results.setdefault((impl,) + key, []).append(r)
            all_lines += lines
            print(f"run {run + 1}/{a.runs} {impl}: {len(lines)} lines, {time.time() - t0:.0f} s",
                  file=sys.stderr, flush=True)

    failures, rows = [], []
    med = {}  # (impl, kv, context) -> (cached, full)
    for key in order:
        h, t = results.get(("headroom",) + key, []), results.get(("torch",) + key, [])
        if not t:
            failures.append(f"{key}: torch gave no line")
            continue
        for impl, lines in (("headroom", h), ("torch", t)):
            med[(impl,) + key] = (statistics.median(r["cached_tok_s"] for r in lines),
                                  statistics.median(r["full_tok_s"] for r in lines),
                                  statistics.median(r["cached_cpu_tok_s"] for r in lines))
            worst = max(r["max_abs_logit_diff"] for r in lines)
            if worst > LOGIT_TOLERANCE:
                failures.append(f"{key}: {impl}'s cached logits differ from its full forward's by {worst:.3g}")
        for field in ("parameters", "kv_bytes_per_token"):
            if h[0][field] != t[0][field]:
                failures.append(f"{key}: {field} differs (headroom {h[0][field]}, torch {t[0][field]})")
        hc, hf, hc_cpu = med[("headroom",) + key]
        tc, tf, tc_cpu = med[("torch",) + key]
        hc_runs = [r["cached_tok_s"] for r in h]
        kv, g, context = key
        rows.append([f"{kv} ({g})", str(context),
                     f"{hc:,.1f}" + (f" ({spread(hc_runs, 1)})" if a.runs > 1 else ""),
                     f"{tc:,.1f}", f"**{hc / tc:.2f}**", f"{hc_cpu / tc_cpu:.2f}", f"{hf:,.1f}", f"{tf:,.1f}",
                     f"**{hc / hf:.1f}**", f"{tc / tf:.1f}",
                     f"{h[0]['kv_bytes_per_token']:,}", f"{h[0]['kv_bytes']:,}",
                     f"{h[0]['max_abs_logit_diff']:.1e} / {t[0]['max_abs_logit_diff']:.1e}"])

    load_after = os.getloadavg()
    print(f"Decoding one row: d_model {a.d_model}, {a.heads} query heads, {a.layers} layers, max_len {a.max_len}, "
          f"vocab {a.vocab}, float32, {a.threads} thread(s); per context L the {a.steps} tokens at contexts "
          f"L-{a.steps - 1}..L (cached: after a prefill of L-{a.steps}; uncached: a full forward over the "
          f"context per token), tok/s = {a.steps} / their summed time, median of {a.reps} reps after "
          f"{a.warmup} warm-up, median over {a.runs} alternating run(s) of each side.")
    torch_version = next((r["torch_version"] for r in all_lines if "torch_version" in r), "?")
    print(f"torch {torch_version} via {a.python}; GEMMs: headroom through {headroom_blas}, torch through {torch_blas}. CPU: {cpu_model()}. "
          f"Load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
          f"{time.time() - started:.0f} s in all.")
    print()
    header = ["kv (G)", "L", "headroom cached tok/s", "torch cached tok/s", "headroom/torch",
              "headroom/torch by CPU time", "headroom uncached tok/s", "torch uncached tok/s", "headroom cached/uncached",
              "torch cached/uncached", "KV bytes/token", "KV bytes at L", "max logit diff h / t"]
    print_table(header, rows)
    print()

    # The goals of issue 16.
    goals = []
    at_goal = [(key, med[("headroom",) + key]) for key in order if key[2] == GOAL_CONTEXT
               and ("headroom",) + key in med]
    if at_goal:
        worst_key, (c, f, _) = min(at_goal, key=lambda kf: kf[1][0] / kf[1][1])
        ok = all(v[0] / v[1] >= SPEEDUP_GOAL for _, v in at_goal)
        goals.append(f"cached >= {SPEEDUP_GOAL:.0f}x uncached at L {GOAL_CONTEXT}: "
                     f"{'met' if ok else 'NOT met'} (smallest {c / f:.1f}x, {worst_key[0]})")
    else:
        goals.append(f"cached >= {SPEEDUP_GOAL:.0f}x uncached at L {GOAL_CONTEXT}: not measured (no L {GOAL_CONTEXT})")
    ratios = [(key, med[("headroom",) + key][0] / med[("torch",) + key][0]) for key in order
              if ("torch",) + key in med]
    slow = [f"{k[0]} L {k[2]} ({r:.2f})" for k, r in ratios if r <= 1.0]
    cpu_ratios = [med[("headroom",) + key][2] / med[("torch",) + key][2] for key in order
                  if ("torch",) + key in med]
    goals.append("headroom cached faster than torch at every length: " +
                 ("met" if not slow else "NOT met at " + ", ".join(slow)) +
                 (f" (ratios {min(r for _, r in ratios):.2f}-{max(r for _, r in ratios):.2f}; by CPU time "
                  f"{min(cpu_ratios):.2f}-{max(cpu_ratios):.2f})" if ratios else ""))
    bpt = {r["kv"]: r["kv_bytes_per_token"] for r in all_lines if r["impl"] == "headroom"}
    if "mha" in bpt and "mqa" in bpt:
        exact = bpt["mqa"] * a.heads == bpt["mha"]
        goals.append(f"MQA's KV cache exactly 1/h of MHA's: {'met' if exact else 'NOT met'} "
                     f"({bpt['mqa']:,} x {a.heads} = {bpt['mqa'] * a.heads:,} against {bpt['mha']:,} bytes/token)")
        if not exact:
            failures.append("MQA's KV bytes per token are not 1/h of MHA's")
    for line in goals:
        print(f"- {line}")

    if a.json:
        with open(a.json, "w") as f:
            for r in all_lines:
                f.write(json.dumps(r) + "\n")
    if failures:
        print(file=sys.stderr)
        for msg in failures:
            print(f"decode_compare: sanity check failed: {msg}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
