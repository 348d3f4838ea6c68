#!/usr/bin/env python3
"""bench_emit.py - what the Python emitter costs a step: buffer digests and collective events.

    /usr/bin/python3 bench/bench_emit.py [--mib 256] [--repeat 5] [--params 7e9] [--bucket-mib 25]

Prints markdown, asserts nothing (docs/benchmarks.md, "The Python emitter"):
1. Buffer digests on one core (a float32 tensor of --mib MiB, contiguous, already in memory): the
   emitter before issue 40 (the tensor's bytes copied out, then SHA-256), SHA-256 over the tensor's
   own memory, and XXH3-128 over it (the default where python3-xxhash is installed). Min and median
   of --repeat runs, in GB/s (10^9 bytes).
2. A collective event: RunWriter.collective with an out_digest, without the digest (microseconds).
3. The extrapolation to a data-parallel step of a --params model (bf16 gradients, DDP buckets of
   --bucket-mib MiB): every rank digests its reduced gradient once (the bucket reductions'
   out_digest), at the median rates of table 1, plus one event per bucket.
"""
import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402

import longstraw_emit as le  # noqa: E402
from longstraw_emit.digests import buffer_digest  # noqa: E402


def rate(fn, nbytes, repeat):
    fn()  # warm: pages touched, caches as in a step
    secs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        secs.append(time.perf_counter() - t0)
    return nbytes / min(secs) / 1e9, nbytes / statistics.median(secs) / 1e9


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--params", type=float, default=7e9)
    ap.add_argument("--bucket-mib", type=int, default=25)
    a = ap.parse_args(argv)
    if a.mib < 1 or a.repeat < 1 or a.params <= 0 or a.bucket_mib < 1:
        print("bench_emit.py: --mib, --repeat, --bucket-mib must be >= 1 and --params > 0", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    t = torch.randn(a.mib * (1 << 20) // 4, dtype=torch.float32)
    n = t.numel() * 4
    rows = [("SHA-256 of a copy (the emitter before)",
             lambda: hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()),
            ("SHA-256 over the tensor's memory", lambda: buffer_digest(t, "sha256"))]
    have_xxh = le.default_digest_alg() == "xxh3_128"
    if have_xxh:
        rows.append(("XXH3-128 over the tensor's memory (default)", lambda: buffer_digest(t, "xxh3_128")))
    print(f"bench_emit: {a.mib} MiB float32, one core, {a.repeat} runs; torch {torch.__version__}, "
          f"python {sys.version.split()[0]}\n")
    print("| digest | GB/s min time | GB/s median |\n|---|---:|---:|")
    med = {}
    for name, fn in rows:
        best, mid = rate(fn, n, a.repeat)
        med[name] = mid
        print(f"| {name} | {best:.2f} | {mid:.2f} |")
    if not have_xxh:
        print("\n(python3-xxhash not installed: XXH3-128 not measured)")

    # 2. one event
    with tempfile.TemporaryDirectory() as d:
        prof = os.path.join(d, "p.json")
        with open(prof, "w") as f:
            f.write('{"name":"bench"}\n')
        cfg = {"objective": "grpo", "grad_mode": "full", "dtype": "f32", "cp_ranks": 1, "group": 1,
               "steps_requested": 1, "strategy": "longstraw", "faults": [], "n_layers": 1, "model": {}}
        w = le.RunWriter(os.path.join(d, "run"), 0, 1, "run-bench", "bench", prof,
                         groups=[le.Group("dp", "dp", [0])], phases=["replay"], layer_kinds=["attn"], config=cfg,
                         artifacts=[{"role": "other", "name": "bench"}])
        dig = "xxh3_128:" + "0" * 32
        k = 20000
        t0 = time.perf_counter()
        for i in range(k):
            w.collective("dp", "allreduce", "sum", 1 << 20, "bf16", 2 << 20, "grad_allreduce", step=0, out_digest=dig)
        ev_us = (time.perf_counter() - t0) / k * 1e6
        w.close()
    print(f"\n| collective event (writer, zstd) | {ev_us:.1f} µs |\n|---|---:|")

    # 3. extrapolation
    grad_bytes = a.params * 2
    buckets = grad_bytes / (a.bucket_mib * (1 << 20))
    print(f"\nA {a.params / 1e9:g}B-parameter data-parallel step, bf16 gradients ({grad_bytes / 1e9:.0f} GB reduced "
          f"per rank), {buckets:.0f} buckets of {a.bucket_mib} MiB: the emitter's work per rank and step\n")
    print("| digest | digest time | events | total |\n|---|---:|---:|---:|")
    ev_s = buckets * ev_us / 1e6
    for name, _ in rows:
        dt = grad_bytes / (med[name] * 1e9)
        print(f"| {name} | {dt:.1f} s | {ev_s * 1e3:.0f} ms | {dt + ev_s:.1f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
