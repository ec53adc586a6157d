#!/usr/bin/python3
"""nanoGPT's CPU character recipe on the King James Bible: headroom against PyTorch,
held-out loss and wall time, in one invocation (see bench/README.md, "A character
model on real text").

    /usr/bin/python3 bench/char_recipe.py --seeds 3

It writes the kjv corpus's two splits with `headroom corpora --corpus kjv
--write-splits DIR`, so that both sides train on the same characters and are scored on
the same held-out ones; then, for each seed and each thread count of --threads, trains
the recipe in headroom (`headroom train`, then `headroom eval --text DIR/val.txt`)
and in PyTorch (bench/torch_char_recipe.py), alternating, each in a fresh process;
then PyTorch as installed (unless --no-torch-default). Each side draws its own batches
from its own RNG; the seeds are the same numbers, not the same draws.

The recipe (nanoGPT's README, CPU shakespeare_char run; its config file and train.py
for the rest): 4 layers, 4 heads, d_model 128, context 64, batch 12, 2000 updates, lr
1e-3 with 100 warm-up steps and cosine decay to 1e-4, AdamW betas (0.9, 0.99) eps
1e-8, weight decay 0.1 on every tensor of 2 or more axes (nanoGPT's rule: headroom's
--decay-embeddings, torch's --decay all-2d; --decay no-embeddings runs both with
headroom's default rule instead), clip 1.0, no dropout, no bias in the linears, tied
embeddings, GELU MLP of 4 d_model, pre-LayerNorm, GPT-2's initialisation.

The score is every character of the val text predicted once, in windows of 65
characters with stride 64 (headroom eval --text's rule), in nats per character. The
times: `train` is the 2000 updates with their batch drawing (headroom: from its
metrics.csv, whose one row at step 2000 covers exactly those; torch: timed around its
loop); `end to end` is the wall time of the processes, from start to exit, training
and scoring the val text (headroom's two commands; torch's one, `import torch`
included), and beside it the ratio of their CPU time (user + system, from wait4), the
steadier measure at one thread on a machine that other work shares.

Threads and BLAS: headroom gets --threads N (and OPENBLAS_NUM_THREADS, OMP_NUM_THREADS
and BLIS_NUM_THREADS N, as compare.py sets them). torch gets torch.set_num_threads(N)
and, as in compare.py, the BLIS headroom links with headroom's kernels (--torch-blas
same, the default) and headroom's glibc allocator settings (--torch-allocator
retain); at N >= 2 its BLAS runs on one thread, its intra-op pool sharing the work:
Debian's BLIS is built with pthreads and starts its threads at every call, and
OpenBLAS's threads and torch's spinning OpenMP threads slow each other down: at 2
threads either ran this recipe slower than one thread did (the numbers are in
bench/log/issue-46-char-recipe.md). "As installed" is torch with none of these: no
thread variables, no preload, glibc's defaults, so torch.get_num_threads() and
Debian's OpenBLAS, which then uses every core, choose; it is held against headroom at
the largest --threads. Progress on stderr, the table on stdout; --json PATH
keeps every run's record. Exit status 1 when the two sides built different models
(parameter counts, vocabularies, counted characters).
"""

import argparse
import csv
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import cpu_model, linked_blas, run_once, thread_env  # noqa: E402

STEPS, BATCH, SEQ_LEN = 2000, 12, 64
MODEL = ["--d-model", "128", "--heads", "4", "--layers", "4", "--seq-len", str(SEQ_LEN), "--batch", str(BATCH)]
RECIPE = ["--lr", "1e-3", "--min-lr", "1e-4", "--warmup", "100", "--beta2", "0.99", "--weight-decay", "0.1",
          "--clip", "1.0"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 on each side (default 3)")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    p.add_argument("--no-torch-default", dest="torch_default", action="store_false",
                   help="leave out PyTorch at its own default thread count")
    p.add_argument("--steps", type=int, default=STEPS, help=f"updates (default {STEPS}; fewer for a quick check)")
    p.add_argument("--decay", choices=("all-2d", "no-embeddings"), default="all-2d",
                   help="all-2d (default): nanoGPT's weight-decay rule on both sides; no-embeddings: headroom's "
                        "default rule on both")
    p.add_argument("--build", default="build", help="directory holding headroom and bench/train_step_bench")
    p.add_argument("--python", default="/usr/bin/python3", help="a python3 with torch (default /usr/bin/python3)")
    p.add_argument("--work", metavar="DIR", help="where the splits and runs go (default: a temporary directory, "
                                                 "removed at the end)")
    p.add_argument("--json", metavar="PATH", help="also write every run's record to PATH, a JSON line each")
    p.add_argument("--torch-blas", choices=("same", "native"), default="same",
                   help="same (default): torch on the BLIS headroom links, with its kernels; native: the system's "
                        "libblas.so.3")
    p.add_argument("--torch-allocator", choices=("retain", "glibc"), default="retain",
                   help="retain (default): torch keeps freed memory as headroom does; glibc: glibc's defaults")
    a = p.parse_args()
    try:
        a.threads = [int(t) for t in a.threads.split(",") if t.strip()]
    except ValueError:
        p.error(f"--threads takes whole numbers, got {a.threads}")
    if not a.threads or min(a.threads) < 1:
        p.error("--threads needs thread counts of at least 1")
    if a.seeds < 1 or a.steps < 100:
        p.error("--seeds must be >= 1 and --steps >= 100 (the warm-up)")
    a.headroom = Path(a.build) / "headroom"
    a.bench = Path(a.build) / "bench" / "train_step_bench"
    for binary, target in ((a.headroom, "headroom"), (a.bench, "train_step_bench")):
        if not binary.is_file():
            p.error(f"{binary} not found; build it with `cmake --build build -j2 --target {target}`, or pass --build")
    return a


def timed(cmd, env):
    """Runs cmd; returns (stdout, wall seconds from start to exit, its CPU seconds, user + system)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen([str(c) for c in cmd], env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read()
        if proc.returncode != 0:
            sys.stderr.write(stdout + err.read())
            sys.exit(f"char_recipe: `{' '.join(map(str, cmd))}` failed with exit status {proc.returncode}")
    return stdout, wall, usage.ru_utime + usage.ru_stime


def headroom_run(a, splits, runs, seed, threads, env):
    out = runs / f"headroom-t{threads}-s{seed}"
    decay = ["--decay-embeddings"] if a.decay == "all-2d" else []
    train = [a.headroom, "train", "--text", splits / "train.txt", "--val-text", splits / "val.txt", *MODEL,
             "--no-bias", "--tie-embeddings", *RECIPE, *decay, "--steps", a.steps, "--threads", threads,
             "--seed", seed, "--eval-every", a.steps, "--eval-batches", 1, "--sample-chars", 0, "--save-every", 0,
             "--quiet", "--overwrite", "--out", out]
    summary, train_wall, train_cpu = timed(train, env)
    parameters = int(re.search(r"(\d+) parameters", summary).group(1))
    # eval runs on the run's own thread count (its config.json).
    report, eval_wall, eval_cpu = timed([a.headroom, "eval", "--model", out, "--text", splits / "val.txt", "--json"],
                                        env)
    scored = json.loads(report)
    with open(out / "metrics.csv", newline="") as f:
        last = list(csv.DictReader(f))[-1]
    tokens = a.steps * BATCH * SEQ_LEN
    return {"impl": "headroom", "seed": seed, "threads": threads, "val_loss": scored["loss"],
            "counted": scored["targets"], "vocab": scored["vocab"], "parameters": parameters,
            "train_s": tokens / float(last["tokens_per_s"]), "end_to_end_s": train_wall + eval_wall,
            "end_to_end_cpu_s": train_cpu + eval_cpu,
            "eval_s": eval_wall, "config": json.loads((out / "config.json").read_text())}


def torch_run(a, splits, seed, threads, env):
    """torch at `threads` intra-op threads with its BLAS on one (see the module's doc), or with 0 as installed."""
    blas = ["--blas-threads", 1] if threads > 1 else []
    cmd = [a.python, HERE / "torch_char_recipe.py", "--train", splits / "train.txt", "--val", splits / "val.txt",
           "--steps", a.steps, "--decay", a.decay, "--seed", seed, "--threads", threads, *blas]
    stdout, wall, cpu = timed(cmd, env)
    r = json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    r.update({"impl": "torch", "setting": threads or "as installed", "end_to_end_s": wall, "end_to_end_cpu_s": cpu})
    return r


def mean_sd(values, digits):
    if len(values) < 2:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def difference(h, t):
    """Mean of h minus mean of t, ± the standard error of that difference (unpaired)."""
    d = statistics.mean(h) - statistics.mean(t)
    if len(h) < 2 or len(t) < 2:
        return f"{d:+.4f}"
    return f"{d:+.4f} ± {math.sqrt(statistics.variance(h) / len(h) + statistics.variance(t) / len(t)):.4f}"


def main():
    a = parse_args()
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="char_recipe."))
    splits, runs = work / "kjv", work / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(a.headroom), "corpora", "--corpus", "kjv", "--write-splits", str(splits)], check=True,
                   stdout=subprocess.DEVNULL)

    torch_base = dict(os.environ)
    for key in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "BLIS_NUM_THREADS", "MKL_NUM_THREADS", "LD_PRELOAD",
                "BLIS_ARCH_TYPE"):
        torch_base.pop(key, None)
    installed = dict(torch_base)  # torch as a user runs it: its own BLAS and thread counts
    if a.torch_allocator == "retain":
        torch_base["MALLOC_MMAP_THRESHOLD_"] = str(32 * 1024 * 1024)
        torch_base["MALLOC_TRIM_THRESHOLD_"] = str(1024 * 1024 * 1024)
    headroom_blas, blis_libblas = linked_blas(a.headroom)
    torch_blas = "the system's libblas.so.3 (OpenBLAS on Debian)"
    if a.torch_blas == "same" and headroom_blas == "BLIS":
        if blis_libblas is None:
            sys.exit("char_recipe: headroom links BLIS but BLIS's libblas.so.3 is not beside it; use --torch-blas native")
        probe = run_once([str(a.bench), "--steps", "1", "--warmup-steps", "1"], dict(os.environ, BLIS_ARCH_DEBUG="1"))
        torch_base["LD_PRELOAD"] = str(blis_libblas)
        torch_base["BLIS_ARCH_TYPE"] = str(probe["blis_kernels_id"])
        torch_blas = f"BLIS ({blis_libblas}, preloaded), {probe['blis_kernels']} kernels as headroom's"

    load_before = os.getloadavg()
    started = time.time()
    records = []
    for seed in range(a.seeds):
        for threads in a.threads:
            env = thread_env(threads)
            records.append(headroom_run(a, splits, runs, seed, threads, env))
            records.append(torch_run(a, splits, seed, threads, torch_base))
            for r in records[-2:]:
                print(f"seed {seed}, {threads} thread(s), {r['impl']}: val {r['val_loss']:.4f}, "
                      f"train {r['train_s']:.1f} s, end to end {r['end_to_end_s']:.1f} s", file=sys.stderr)
        if a.torch_default:
            records.append(torch_run(a, splits, seed, 0, installed))
            r = records[-1]
            print(f"seed {seed}, torch as installed ({r['threads']} intra-op thread(s)): val {r['val_loss']:.4f}, "
                  f"train {r['train_s']:.1f} s", file=sys.stderr)
    load_after = os.getloadavg()

    failures = []
    h0 = next(r for r in records if r["impl"] == "headroom")
    t0 = next(r for r in records if r["impl"] == "torch")
    if h0["vocab"] != t0["vocab"] or h0["counted"] != t0["counted"]:
        failures.append(f"vocab {h0['vocab']} / {t0['vocab']}, counted {h0['counted']} / {t0['counted']}")
    if h0["parameters"] != t0["parameters"]:
        failures.append(f"parameters {h0['parameters']} / {t0['parameters']}")

    rows = []
    settings = [(f"{t}", t, t) for t in a.threads]
    if a.torch_default:
        n = next(r["threads"] for r in records if r.get("setting") == "as installed")
        # torch as installed lets its BLAS use every core; held against headroom at the most threads run.
        settings.append((f"{max(a.threads)}; torch as installed ({n} intra-op, its BLAS's own)", max(a.threads),
                         "as installed"))
    for label, h_threads, t_setting in settings:
        h = [r for r in records if r["impl"] == "headroom" and r["threads"] == h_threads]
        t = [r for r in records if r.get("setting") == t_setting]
        hv, tv = [r["val_loss"] for r in h], [r["val_loss"] for r in t]
        ht, tt = [r["train_s"] for r in h], [r["train_s"] for r in t]
        he, te = [r["end_to_end_s"] for r in h], [r["end_to_end_s"] for r in t]
        hc, tc = [r["end_to_end_cpu_s"] for r in h], [r["end_to_end_cpu_s"] for r in t]
        rows.append([
            label,
            mean_sd(hv, 4) if h else "-", mean_sd(tv, 4), difference(hv, tv) if h else "-",
            mean_sd(ht, 1) if h else "-", mean_sd(tt, 1),
            f"**{statistics.mean(tt) / statistics.mean(ht):.2f}**" if h else "-",
            mean_sd(he, 1) if h else "-", mean_sd(te, 1),
            f"{statistics.mean(te) / statistics.mean(he):.2f}" if h else "-",
            f"{statistics.mean(tc) / statistics.mean(hc):.2f}" if h else "-",
        ])

    print(f"nanoGPT's CPU character recipe on kjv ({h0['counted']:,} val characters scored, vocab {h0['vocab']}, "
          f"{t0['parameters']:,} parameters), {a.steps} updates, seeds 0-{a.seeds - 1} on each side; "
          f"weight decay rule: {a.decay}.")
    print(f"torch {t0['torch_version']} via {a.python}; CPU: {cpu_model()}; GEMMs: headroom through "
          f"{headroom_blas}, torch through {torch_blas} (at 2 or more intra-op threads on one BLAS thread; as "
          f"installed: its own libblas.so.3 and thread counts); torch allocator: {a.torch_allocator}.")
    print(f"Load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
          f"{time.time() - started:.0f} s in all.")
    print("val loss: nats per character, mean ± sd over seeds; difference: headroom - torch, ± its standard error. "
          "train: the updates with their batch drawing; end to end: the processes' wall time, training and scoring. "
          "ratio = torch s / headroom s: above 1, headroom is faster. Ratio by CPU time: of the processes' CPU "
          "time (user + system, every thread), end to end; at 1 thread it leaves out time the core gave to "
          "other processes.")
    print()
    header = ["threads", "headroom val loss", "torch val loss", "difference", "headroom train s", "torch train s",
              "ratio torch/headroom", "headroom end to end s", "torch end to end s", "end-to-end ratio",
              "ratio by CPU time"]
    print("| " + " | ".join(header) + " |")
    print("|---|" + "|".join("---:" for _ in header[1:]) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")

    if a.json:
        with open(a.json, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    if not a.work:
        shutil.rmtree(work)
    if failures:
        print("\nFAILED: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
