#!/usr/bin/python3
"""Side-by-side training speed: headroom (train_step_bench) against PyTorch
(torch_train_step.py) on the same model, batch and thread count.

    /usr/bin/python3 bench/compare.py --configs tiny,small

For each config it runs the two implementations alternately, each in a fresh
process (headroom, torch, headroom, torch, ... --reps times), takes each run's
median ms per step, and prints a Markdown table of the medians over runs. The
configs take turns: rep 1 of every config, then rep 2, and so on (--order
interleaved), so that all of them meet the machine's slow and fast phases alike;
with a llama config and the config of its size (llama and small, llama-tiny and
tiny), a line after the table holds the one's ratios against the other's. The ratio
is torch ms / headroom ms: above 1 headroom is faster. Progress goes to stderr, the
table to stdout. Exit status 1 when a sanity check failed (different parameter
counts or model keys, or an initial loss far from ln(vocab)), 2 for a usage error.

The llama configs (llama-tiny, llama: tiny's and small's sizes) pass both programs
the Llama-style keys of docs/design.md #17: --pos rope --norm-type rmsnorm --ffn
swiglu --no-bias --kv-heads 2.

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, set on some machines, are left as they are
(they can slow OpenBLAS, and with it both sides); the table's header says whether
they are set. OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and BLIS_NUM_THREADS are set to
--threads for both children.

--torch-blas same (the default) gives torch the BLAS library headroom's benchmark is
linked to, so that both run the same GEMM kernels: when that is BLIS, torch gets
BLIS's libblas.so.3 through LD_PRELOAD (Debian's torch calls the BLAS interface of
whatever libblas.so.3 it loads). --torch-blas native leaves torch on the system's
libblas.so.3 (OpenBLAS on Debian).

--scaling N measures headroom alone instead: 1 thread against N, alternating, the
order swapped every rep; then build/bench/core_scaling, what the machine itself allows
at N threads (N copies of a GEMM, an FMA loop and a streaming loop against one).
Beside each speedup, where the N-thread step's time went (parallel_stats() over the
timed steps): the share of the threads' time spent waiting inside shared loops (for
a worker to wake, or for the last chunk); the shares of the step's wall time in
loops kept on the caller (sharing did not pay: a stalled worker, or loops too short)
and in the serial code between loops, both on one thread; and the thread time of
the work itself against the 1-thread step's (above 1: the same work ran slower on N
threads, each op reading what another core wrote, or the cores slowing each other).
With --contend, a spin loop keeps one core busy (pinned to the last CPU) through
every run: a shared machine, where N threads must not be much slower than one.
"""

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name: (d_model, n_heads, n_layers, seq_len T, batch B)
CONFIGS = {
    "tiny": (64, 4, 2, 32, 16),
    "small": (128, 8, 4, 64, 32),
    "medium": (256, 8, 4, 128, 16),
    "large": (512, 8, 6, 256, 8),
    "llama-tiny": (64, 4, 2, 32, 16),
    "llama": (128, 8, 4, 64, 32),
    # The claims study's narrowest heads: 48 heads of width 1 at d_model 48.
    "narrow": (48, 48, 2, 32, 16),
}
# The Llama-style blocks of docs/design.md #17, as flags both programs take: rotary
# positions, RMSNorm, SwiGLU (d_ff 8 ceil(d_model / 3)), no biases, n_heads / 4 kv heads.
LLAMA_FLAGS = ["--pos", "rope", "--norm-type", "rmsnorm", "--ffn", "swiglu", "--no-bias"]
MODEL_FLAGS = {
    "llama-tiny": ["--kv-heads", 2] + LLAMA_FLAGS,
    "llama": ["--kv-heads", 2] + LLAMA_FLAGS,
}
# The config of each Llama-style one's size, whose ratio it is held against.
LLAMA_BASE = {"llama-tiny": "tiny", "llama": "small"}
# Keys of the JSON lines that say which model was built; both sides must agree.
MODEL_KEYS = ("d_model", "n_heads", "n_kv_heads", "n_layers", "d_ff", "pos", "norm_type", "ffn", "bias")
WATCHED_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "BLIS_ARCH_TYPE")
# The initial loss on uniform tokens, with GPT-2's small initial weights, is within
# a few hundredths of ln(vocab); further off means a different model.
INITIAL_LOSS_TOLERANCE = 0.1


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="tiny,small",
                   help=f"comma-separated, of {', '.join(CONFIGS)} (default tiny,small)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per run (default 30)")
    p.add_argument("--warmup-steps", type=int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--reps", type=int, default=3, help="runs of each implementation per config (default 3)")
    p.add_argument("--threads", type=int, default=1, help="threads for both (default 1)")
    p.add_argument("--vocab", type=int, default=64, help="token ids uniform in [0, vocab) (default 64)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--build", default="build/bench",
                   help="directory holding train_step_bench (default build/bench)")
    p.add_argument("--python", default="/usr/bin/python3", help="a python3 with torch (default /usr/bin/python3)")
    p.add_argument("--order", choices=("interleaved", "config"), default="interleaved",
                   help="interleaved (default): rep 1 of every config, then rep 2, ..., so that the configs' ratios "
                        "meet the same machine phases; config: all reps of one config, then the next")
    p.add_argument("--json", metavar="PATH", help="also write every run's JSON line to PATH")
    p.add_argument("--scaling", type=int, metavar="N",
                   help="instead of the comparison: headroom alone at 1 and N threads, alternating, and the speedup")
    p.add_argument("--contend", action="store_true",
                   help="with --scaling: keep one core busy with a spin loop (another process) through every run")
    p.add_argument("--torch-allocator", choices=("retain", "glibc"), default="retain",
                   help="retain (default): torch keeps freed memory as headroom does (glibc's M_MMAP_THRESHOLD "
                        "32 MiB, M_TRIM_THRESHOLD 1 GiB, through MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_); "
                        "glibc: its defaults, which return large blocks to the system after every step")
    p.add_argument("--torch-blas", choices=("same", "native"), default="same",
                   help="same: torch runs on the BLAS library headroom's benchmark links (default); "
                        "native: on the system's libblas.so.3")
    a = p.parse_args()
    names = [c.strip() for c in a.configs.split(",") if c.strip()]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown or not names:
        p.error(f"unknown config {', '.join(unknown) or '(none)'}; choose from {', '.join(CONFIGS)}")
    a.configs = names
    if a.contend and a.scaling is None:
        p.error("--contend needs --scaling N (it compares 1 and N threads under the same load)")
    if a.scaling is not None and a.scaling < 2:
        p.error(f"--scaling must be >= 2 (threads to compare with one), got {a.scaling}")
    for flag in ("steps", "reps", "threads", "vocab"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag} must be >= 1, got {getattr(a, flag)}")
    if a.warmup_steps < 1:
        p.error("--warmup-steps must be >= 1: the first step allocates and is never typical")
    a.bench = Path(a.build) / "train_step_bench"
    if not a.bench.is_file():
        p.error(f"{a.bench} not found; build it with "
                f"`cmake -S . -B build && cmake --build build -j2 --target train_step_bench`, or pass --build")
    a.core_scaling = Path(a.build) / "core_scaling"
    if a.scaling is not None and not a.contend and not a.core_scaling.is_file():
        p.error(f"{a.core_scaling} not found (--scaling runs it for the machine's ceiling); build it with "
                f"`cmake --build build -j2 --target core_scaling`, or pass --build")
    return a


def run_once(cmd, env):
    """Runs one benchmark process and returns its JSON line as a dict."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr)
        sys.exit(f"compare: `{' '.join(map(str, cmd))}` failed with exit status {proc.returncode}")
    r = json.loads(lines[-1])
    # BLIS_ARCH_DEBUG=1 (blis_env) makes BLIS name the kernels it selected on stderr.
    m = re.search(r"selecting sub-configuration '([^']+)'", proc.stderr)
    if m:
        r.setdefault("blis_kernels", m.group(1))
    return r


def linked_blas(binary):
    """(name, libblas.so.3 of the same library or None) for the BLAS `binary` links."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "libblis.so" in line and "=>" in line:
            lib = Path(line.split("=>")[1].split("(")[0].strip())
            blas = lib.parent / "libblas.so.3"
            return "BLIS", (blas if blas.exists() else None)
        if "libopenblas" in line:
            return "OpenBLAS", None
    return "unknown", None


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def spread(values, digits):
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def print_table(header, rows):
    """A Markdown table: the first two columns left-aligned, the numbers right-aligned."""
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def write_json(path, runs):
    """Every run's JSON line to path, when --json asked for it."""
    if path:
        with open(path, "w") as f:
            for r in runs:
                f.write(json.dumps(r) + "\n")


def common_args(a, name, threads):
    d_model, heads, layers, seq_len, batch = CONFIGS[name]
    return [str(v) for v in ["--d-model", d_model, "--heads", heads, "--layers", layers, "--seq-len", seq_len,
                             "--batch", batch, "--vocab", a.vocab, "--steps", a.steps,
                             "--warmup-steps", a.warmup_steps, "--threads", threads, "--seed", a.seed]
            + MODEL_FLAGS.get(name, [])]


def shape_label(name):
    """d_model/heads/layers/T/B, heads as "8 (2 kv)" when K/V are grouped."""
    d_model, heads, layers, seq_len, batch = CONFIGS[name]
    flags = MODEL_FLAGS.get(name, [])
    if "--kv-heads" in flags:
        heads = f"{heads} ({flags[flags.index('--kv-heads') + 1]} kv)"
    return f"{d_model}/{heads}/{layers}/{seq_len}/{batch}"


def thread_env(threads):
    env = dict(os.environ)
    for key in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "BLIS_NUM_THREADS"):
        env[key] = str(threads)
    return env


def start_spinner():
    """Another process, a plain busy loop pinned to the last CPU: the load of a shared machine."""
    cpu = max(os.sched_getaffinity(0))
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    time.sleep(0.5)  # let it settle on its core
    return proc, cpu


def where_time_went(run, threads, one_thread_run):
    """An N-thread run's timed steps, from parallel_stats() (train_step_bench's loops_*):
    the share of the N threads' time spent waiting inside shared loops; the shares of the
    steps' wall time in loops kept on the caller and between loops; the thread time of
    the work against the 1-thread run's steps. With S the steps' wall time, L the shared
    loops' and B the time the threads spent in their chunks, N S = B + (N L - B) +
    N (S - L): the work is B + (S - L), what the caller did outside shared loops."""
    steps = sum(run["ms_per_step"])
    shared, busy, kept = run["loops_shared_ms"], run["loops_busy_ms"], run["loops_kept_ms"]
    return ((threads * shared - busy) / (threads * steps), kept / steps, (steps - shared - kept) / steps,
            (busy + steps - shared) / sum(one_thread_run["ms_per_step"]))


def scaling(a):
    """headroom at 1 and a.scaling threads, alternating, per config: the speedup table."""
    started = time.time()
    load_before = os.getloadavg()
    spinner, spin_cpu = start_spinner() if a.contend else (None, None)
    try:
        return scaling_runs(a, started, load_before, spin_cpu)
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()


def scaling_runs(a, started, load_before, spin_cpu):
    rows, all_runs = [], []
    for name in a.configs:
        runs = {1: [], a.scaling: []}
        for rep in range(a.reps):
            # 1 thread first in odd reps, N first in even ones: on a VM whose speed drifts
            # within a rep, a fixed order would favour one column (even with one thread
            # in both, the second run tends to be the slower).
            for threads in (list(runs) if rep % 2 == 0 else list(reversed(list(runs)))):
                r = run_once([str(a.bench)] + common_args(a, name, threads), thread_env(threads))
                r["config"] = name
                r["rep"] = rep + 1
                runs[threads].append(r)
                all_runs.append(r)
                print(f"[{name}] rep {rep + 1}/{a.reps} {threads} thread(s) median {r['median_ms']:8.2f} ms/step "
                      f"(p10 {r['p10_ms']:.2f}, p90 {r['p90_ms']:.2f})", file=sys.stderr, flush=True)
        one = [r["median_ms"] for r in runs[1]]
        many = [r["median_ms"] for r in runs[a.scaling]]
        paired = [x / y for x, y in zip(one, many)]
        # A model too small for a second thread trains on one (threads_used): no pool to
        # account for.
        split = [where_time_went(r, a.scaling, o) for r, o in zip(runs[a.scaling], runs[1])
                 if r.get("threads_used", a.scaling) > 1]
        rows.append([name, shape_label(name),
                     f"{statistics.median(one):.2f} ({spread(one, 2)})",
                     f"{statistics.median(many):.2f} ({spread(many, 2)})",
                     f"**{statistics.median(one) / statistics.median(many):.2f}**",
                     f"{statistics.median(paired):.2f} ({spread(paired, 2)})",
                     *((f"{100 * statistics.median(s[i] for s in split):.1f}%" if split else "-") for i in range(3)),
                     f"{statistics.median(s[3] for s in split):.3f}" if split else "-"])
    load_after = os.getloadavg()
    load = (f" Another process spun on CPU {spin_cpu} through every run (--contend): a speedup below 1 is how "
            f"much slower {a.scaling} threads are than one on a shared machine." if spin_cpu is not None else "")
    print(f"headroom's training step at 1 and {a.scaling} threads (set_threads: one shard of the batch per "
          f"thread, and the optimizer's loops), median ms over {a.steps} timed steps per run; median over {a.reps} alternating runs "
          f"(1 thread first in odd reps, {a.scaling} first in even ones), min-max in brackets. CPU: {cpu_model()}, {os.cpu_count()} cores. Load average (1 min) "
          f"{load_before[0]:.2f} before, {load_after[0]:.2f} after; {time.time() - started:.0f} s in all.{load}")
    print()
    header = ["config", "d_model/heads/layers/T/B", "1 thread ms/step", f"{a.scaling} threads ms/step",
              "speedup", "paired speedup", "waiting in loops", "loops kept", "between loops", "work / 1 thread"]
    print_table(header, rows)
    write_json(a.json, all_runs)
    if spin_cpu is None:
        # What the machine allows in the same sitting: N independent copies of a GEMM, an
        # FMA loop and a streaming loop against one (bench/core_scaling.cpp). A step's
        # speedup above the GEMM row's would need more than the cores give.
        cmd = [str(a.core_scaling), "--threads", str(a.scaling), "--reps", str(a.reps)]
        print(f"\nWhat the machine allows in the same sitting (`{' '.join(cmd)}`): ", end="", flush=True)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if proc.returncode != 0:
            print(f"core_scaling failed with exit status {proc.returncode}", file=sys.stderr)
            return 1
        print(proc.stdout, end="")
    return 0


def main():
    a = parse_args()
    if a.scaling is not None:
        return scaling(a)
    env = thread_env(a.threads)
    watched = {k: os.environ.get(k) for k in WATCHED_ENV}
    headroom_blas, blis_libblas = linked_blas(a.bench)
    torch_env = dict(env)
    if a.torch_allocator == "retain":
        # headroom::retain_freed_memory()'s two settings (autograd/memory.cpp). Under glibc's
        # defaults torch's larger steps unmap their activations and fault them back in
        # every step, and their times scatter widely; with them they hold steady.
        torch_env["MALLOC_MMAP_THRESHOLD_"] = str(32 * 1024 * 1024)
        torch_env["MALLOC_TRIM_THRESHOLD_"] = str(1024 * 1024 * 1024)
    torch_blas = "the system's libblas.so.3 (OpenBLAS on Debian)"
    if a.torch_blas == "same" and headroom_blas == "BLIS":
        if blis_libblas is None:
            print("compare: headroom links BLIS but BLIS's libblas.so.3 is not beside it; use --torch-blas native",
                  file=sys.stderr)
            return 2
        torch_env["LD_PRELOAD"] = str(blis_libblas)
        torch_blas = f"BLIS ({blis_libblas}, preloaded)"
        # The same kernels as headroom's: headroom sets BLIS_ARCH_TYPE for itself where BLIS
        # 0.9 would run its generic ones (autograd/gemm.cpp); torch gets the same number.
        for e in (env, torch_env):
            e["BLIS_ARCH_DEBUG"] = "1"
        probe = run_once([str(a.bench), "--steps", "1", "--warmup-steps", "0"], env)
        torch_env["BLIS_ARCH_TYPE"] = str(probe["blis_kernels_id"])
        torch_blas += f", its {probe['blis_kernels']} kernels as headroom's (BLIS_ARCH_TYPE={probe['blis_kernels_id']})"
        headroom_blas = f"{probe['gemm_library']}, {probe['blis_kernels']} kernels"
    load_before = os.getloadavg()
    started = time.time()

    rows, all_runs, failures = [], [], []
    commands = {name: {"headroom": [str(a.bench)] + common_args(a, name, a.threads),
                       "torch": [a.python, str(HERE / "torch_train_step.py")] + common_args(a, name, a.threads)}
                for name in a.configs}
    runs_of = {name: {"headroom": [], "torch": []} for name in a.configs}
    # Reps outer, configs inner (--order interleaved): every config's rep r runs in the
    # same minutes, so that ratios of different configs meet the same machine phases and
    # can be compared with each other (the llama target is "at least small's ratio": with
    # configs one after the other, one config's torch runs can meet a slow phase that the
    # next config's, minutes later, miss). --order config runs each config's reps together.
    schedule = ([(rep, name) for rep in range(a.reps) for name in a.configs] if a.order == "interleaved"
                else [(rep, name) for name in a.configs for rep in range(a.reps)])
    for rep, name in schedule:
        for impl in ("headroom", "torch"):
            r = run_once(commands[name][impl], env if impl == "headroom" else torch_env)
            r["config"] = name
            r["rep"] = rep + 1
            runs_of[name][impl].append(r)
            all_runs.append(r)
            print(f"[{name}] rep {rep + 1}/{a.reps} {impl:8s} median {r['median_ms']:8.2f} ms/step "
                  f"(p10 {r['p10_ms']:.2f}, p90 {r['p90_ms']:.2f}; CPU {r['median_cpu_ms']:.2f}), "
                  f"initial loss {r['initial_loss']:.4f}",
                  file=sys.stderr, flush=True)

    paired_of, summary = {}, {}
    for name in a.configs:
        d_model, heads, layers, seq_len, batch = CONFIGS[name]
        runs = runs_of[name]
        h0, t0 = runs["headroom"][0], runs["torch"][0]
        ln_v = math.log(a.vocab)
        print(f"[{name}] same model? parameters: headroom {h0['parameters']}, torch {t0['parameters']}; "
              f"initial loss: headroom {h0['initial_loss']:.4f}, torch {t0['initial_loss']:.4f}, "
              f"ln({a.vocab}) = {ln_v:.4f}", file=sys.stderr, flush=True)
        if h0["parameters"] != t0["parameters"]:
            failures.append(f"{name}: parameter counts differ (headroom {h0['parameters']}, torch {t0['parameters']})")
        for key in MODEL_KEYS:
            if h0.get(key) != t0.get(key):
                failures.append(f"{name}: {key} differs (headroom {h0.get(key)}, torch {t0.get(key)})")
        for r in runs["torch"]:
            if "blis_kernels" in h0 and r.get("blis_kernels") != h0["blis_kernels"]:
                failures.append(f"{name}: torch ran BLIS's {r.get('blis_kernels')} kernels, headroom its "
                                f"{h0['blis_kernels']} ones")
        for impl, r in (("headroom", h0), ("torch", t0)):
            if abs(r["initial_loss"] - ln_v) > INITIAL_LOSS_TOLERANCE:
                failures.append(f"{name}: {impl}'s initial loss {r['initial_loss']:.4f} is not within "
                                f"{INITIAL_LOSS_TOLERANCE} of ln({a.vocab}) = {ln_v:.4f}")

        med = {impl: [r["median_ms"] for r in runs[impl]] for impl in runs}
        h_ms, t_ms = statistics.median(med["headroom"]), statistics.median(med["torch"])
        # Each torch run against the headroom run just before it: the machine's speed
        # drifts between minutes, less between neighbours.
        paired = [t / h for h, t in zip(med["headroom"], med["torch"])]
        paired_of[name] = paired
        # The VM alternates between a quiet and a busy phase lasting tens of seconds,
        # both sides slowing alike; each run's 10th percentile is its quiet-phase
        # speed, so the ratio of the median p10s compares the two in the same phase.
        p10 = {impl: statistics.median(r["p10_ms"] for r in runs[impl]) for impl in runs}
        summary[name] = {"median": t_ms / h_ms, "paired": statistics.median(paired),
                         "p10": p10["torch"] / p10["headroom"]}
        h_cpu = statistics.median(r["median_cpu_ms"] for r in runs["headroom"])
        t_cpu = statistics.median(r["median_cpu_ms"] for r in runs["torch"])
        tokens = batch * seq_len
        flops = h0["gemm_flops"]
        gemm_rate = statistics.median(r["gemm_gflops"] for r in runs["headroom"])
        h_rate, t_rate = flops / (h_ms / 1000) / 1e9, flops / (t_ms / 1000) / 1e9
        rows.append([
            name, shape_label(name),
            f"{h_ms:.2f} ({spread(med['headroom'], 2)})", f"{t_ms:.2f} ({spread(med['torch'], 2)})",
            f"**{t_ms / h_ms:.2f}**", f"{statistics.median(paired):.2f} ({spread(paired, 2)})",
            f"{p10['torch'] / p10['headroom']:.2f}",
            f"{t_cpu / h_cpu:.2f}",
            f"{flops / (gemm_rate * 1e9) * 1000:.1f}",
            f"{h_rate:.1f} ({100 * h_rate / gemm_rate:.0f}%)", f"{t_rate:.1f} ({100 * t_rate / gemm_rate:.0f}%)",
            f"{tokens / (h_ms / 1000):,.0f}", f"{tokens / (t_ms / 1000):,.0f}",
            f"{statistics.median(r['peak_rss_mib'] for r in runs['headroom']):.0f}",
            f"{statistics.median(r['peak_rss_mib'] for r in runs['torch']):.0f}",
            f"{h0['initial_loss']:.3f} / {t0['initial_loss']:.3f}",
        ])

    load_after = os.getloadavg()
    env_note = ", ".join(f"{k}={v}" if v is not None else f"{k} unset" for k, v in watched.items())
    order = ("reps interleaved across configs" if a.order == "interleaved" and len(a.configs) > 1
             else "each config's reps together")
    print(f"Training step, median ms over {a.steps} timed steps (after {a.warmup_steps} warm-up) per run; "
          f"median over {a.reps} alternating runs of each ({order}), min-max of the run medians in brackets.")
    print(f"{a.threads} thread(s), float32, vocab {a.vocab}, AdamW lr 1e-3 wd 0.01, clip 1.0; "
          f"torch {all_runs[-1].get('torch_version', '?') if all_runs else '?'} via {a.python}; CPU: {cpu_model()}.")
    print(f"GEMMs: headroom through {headroom_blas}; torch through {torch_blas}. GEMM floor = the step's GEMM "
          f"FLOPs at the measured rate of one (B T, C) x (C, 4C) GEMM; GFLOP/s = step GEMM FLOPs / step time, and "
          f"in brackets its share of that rate.")
    allocator = ("torch keeps freed memory as headroom does (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_)"
                 if a.torch_allocator == "retain" else "torch on glibc's default allocator settings")
    print(f"Memory: {allocator}. Environment: {env_note}. Load average (1 min) {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after; {time.time() - started:.0f} s in all.")
    print("ratio = torch ms / headroom ms: > 1 means headroom is faster. Paired ratio: the median (and min-max) "
          "over reps of each torch run's ms over the headroom run just before it. p10 ratio: the same of the runs' "
          "10th percentiles, the speed in the machine's quiet phases. The ratio of process CPU "
          "time per step, less sensitive to other processes on the machine, beside it.")
    print()
    header = ["config", "d_model/heads/layers/T/B", "headroom ms/step", "torch ms/step",
              "ratio torch/headroom", "paired ratio", "p10 ratio", "ratio by CPU time", "GEMM floor ms",
              "headroom GFLOP/s", "torch GFLOP/s",
              "headroom tok/s", "torch tok/s", "headroom peak RSS MiB",
              "torch peak RSS MiB", "initial loss h / t"]
    print_table(header, rows)
    against = [(llama, base) for llama, base in LLAMA_BASE.items() if llama in summary and base in summary]
    if against:
        print()
    for llama, base in against:
        # Issue 19's target for the Llama-style config: at least the ratio of the config of
        # its size; each of the three ratios compared, and rep by rep, where the two paired
        # ratios were measured in the same minutes (only with --order interleaved).
        l, b = summary[llama], summary[base]
        parts = [f"{kind} {l[kind]:.2f} vs {b[kind]:.2f} ({'>=' if l[kind] >= b[kind] else '<'})"
                 for kind in ("median", "paired", "p10")]
        line = f"{llama}'s ratio against {base}'s: " + ", ".join(parts)
        if a.order == "interleaved":
            by_rep = [x / y for x, y in zip(paired_of[llama], paired_of[base])]
            line += (f"; rep by rep, {llama}'s paired ratio over {base}'s: {statistics.median(by_rep):.2f} "
                     f"({spread(by_rep, 2)})")
        at_least = all(l[kind] >= b[kind] for kind in ("median", "paired", "p10"))
        print(line + f". {llama} {'at least' if at_least else 'below'} {base}'s ratio "
              f"({'all three' if at_least else 'not all three'} at least {base}'s).")
    write_json(a.json, all_runs)
    if failures:
        print(file=sys.stderr)
        for msg in failures:
            print(f"compare: sanity check failed: {msg}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
