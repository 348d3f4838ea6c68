#!/usr/bin/env python3
"""plan_original.py BUILD_DIR - the original work's runs, as they ran, planned from the shipped Hugging Face
configs (docs/plan.md, "The original work's runs"):

  Qwen3.6-27B, P = 2,088,960, G = 8 responses of R = 8,192, CP-8, bf16, on 96 GB H20s: fits (the replay
  checkpointed per layer: --replay-checkpoint auto picks it), and does not fit with the replay taped;
  G = 2 -> 8 moves the peak by no more than the original's +0.208 GB.

Each case prints "ok CASE: figures" or "FAIL CASE: why"; exit 1 when any failed."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN = os.path.join(ROOT, "tests", "data", "hf", "qwen3.5-27b.json")
GB, GIB = 1e9, 2.0 ** 30


def plan(build, *args):
    """longstraw-plan's JSON and exit status (0 fits, 1 does not fit)."""
    p = subprocess.run([os.path.join(build, "trainer", "longstraw-plan"), *args, "--json"], capture_output=True,
                       text=True)
    if p.returncode not in (0, 1):
        raise RuntimeError("longstraw-plan %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr.strip()))
    return json.loads(p.stdout), p.returncode


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    build = argv[0]
    failed = 0

    def ok(name, text):
        print("ok   %s: %s" % (name, text))

    def bad(name, text):
        nonlocal failed
        failed = 1
        print("FAIL %s: %s" % (name, text))

    qwen = ["--hf-config", QWEN, "--prompt-len", "2088960", "--response-len", "8192", "--cp", "8", "--page-size", "64",
            "--dtype", "bf16", "--device-memory", "96GB"]
    d8, rc = plan(build, *qwen, "--group", "8")
    peak = d8["peak"]["total"]
    if rc == 0 and d8["replay_checkpoint"] == "layer":
        ok("qwen G=8 R=8192 CP-8", "fits 96 GB: peak %.2f GB = %.4f GiB in phase %s, replay checkpointed per layer"
           % (peak / GB, peak / GIB, d8["peak"]["phase"]))
    else:
        bad("qwen G=8 R=8192 CP-8", "exit %d, replay %s, peak %.2f GB" % (rc, d8["replay_checkpoint"], peak / GB))
    dt, rc = plan(build, *qwen, "--group", "8", "--replay-checkpoint", "none")
    if rc == 1:
        ok("qwen taped", "does not fit: peak %.2f GB (every layer's tape over 8,192 tokens)" % (dt["peak"]["total"] / GB))
    else:
        bad("qwen taped", "exit %d: the taped replay of 64 layers over 8,192 tokens should not fit 96 GB" % rc)
    d2, _ = plan(build, *qwen, "--group", "2")
    delta = peak - d2["peak"]["total"]
    if 0 <= delta <= 0.208e9:
        ok("qwen G=2 -> 8", "peak +%.6f GB (the original: +0.208 GB)" % (delta / GB))
    else:
        bad("qwen G=2 -> 8", "peak moved %.6f GB, the original's +0.208 GB or less expected" % (delta / GB))
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
