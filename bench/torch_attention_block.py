#!/usr/bin/python3
"""PyTorch's attention block alone: forward and backward of one layer's
MultiHeadAttention from torch_train_step.py (q, k, v and out projections and the
attention between), at the small/llama size (B 32, T 64, C 128, 8 heads), for
small's per-head path (8 kv heads), the grouped path at 2 and at 8 kv heads
without RoPE, and llama's (2 kv heads, RoPE). Why llama's step gains more over
small's in PyTorch than in headroom (bench/README.md and bench/log/).

    /usr/bin/python3 bench/torch_attention_block.py

It runs under compare.py's settings for torch (one thread; glibc keeping freed
memory; BLIS's libblas.so.3 preloaded with its skx kernels when present),
re-executing itself with them. Median over 7 rounds of each variant's median of 20
timed calls (after 5), the variants taking turns; min over rounds beside it.
"""

import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BLIS_BLAS = Path("/usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3")
SETTINGS = {"MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024), "MALLOC_TRIM_THRESHOLD_": str(1024 * 1024 * 1024),
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "BLIS_NUM_THREADS": "1"}
if BLIS_BLAS.exists():
    SETTINGS.update({"LD_PRELOAD": str(BLIS_BLAS), "BLIS_ARCH_TYPE": "0"})

if any(os.environ.get(k) != v for k, v in SETTINGS.items()):
    os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **SETTINGS})

import torch  # noqa: E402 (after the re-exec, so that the settings hold)

spec = importlib.util.spec_from_file_location("torch_train_step", HERE / "torch_train_step.py")
tts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tts)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    B, T, C, H = 32, 64, 128, 8
    # MultiHeadAttention(d_model, n_heads, n_kv_heads, max_len, out_std, bias, rope)
    variants = {
        "small: 8 kv heads, per-head path": tts.MultiHeadAttention(C, H, 8, T, 0.02, True, False),
        "grouped path, 8 kv heads": tts.MultiHeadAttention(C, H, 8, T, 0.02, True, False),
        "grouped path, 2 kv heads": tts.MultiHeadAttention(C, H, 2, T, 0.02, True, False),
        "llama: 2 kv heads, RoPE, no bias": tts.MultiHeadAttention(C, H, 2, T, 0.02, False, True),
    }
    grouped8 = variants["grouped path, 8 kv heads"]
    grouped8.forward = grouped8.forward_grouped  # the grouped path at G = H: stacking g = 1 head
    x = torch.randn(B, T, C, requires_grad=True)
    results = {name: [] for name in variants}
    for _ in range(7):
        for name, module in variants.items():
            times = []
            for _ in range(25):
                started = time.perf_counter()
                module(x).sum().backward()
                times.append(time.perf_counter() - started)
            results[name].append(statistics.median(times[5:]) * 1e3)
    print(f"PyTorch {torch.__version__}, one attention block (B {B}, T {T}, C {C}, {H} heads), forward and "
          f"backward, ms; settings: {', '.join(f'{k}={v}' for k, v in SETTINGS.items())}")
    print()
    print("| variant | median ms | min ms |")
    print("|---|---:|---:|")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} |")


if __name__ == "__main__":
    main()
