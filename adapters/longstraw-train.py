#!/usr/bin/python3
"""longstraw-train as a parity adapter (adapters/longstraw-train.json, docs/parity.md "Adapters").

Translates the protocol's modes into longstraw-train runs on configs/hybrid-tiny.json (LoRA, pages of 8,
capture chunks of 12, temperature 0.9, epsilon 0.2, beta 0.04: what longstraw-parity --family hybrid runs):
  init       --strategy naive --save-init OUT/weights.safetensors (the weights drawn from --seed)
  run        at --cp ranks (mpirun -np N for N > 1): a score run on the batch without log-probs (its
             --dump-batch old_logprobs are the policy's: OUT/logprobs.safetensors) and a grad run on the
             batch (--dump-grads, --save: grads.safetensors, params.safetensors, its exact loss: loss.json;
             its run directory: OUT/run)
  reference  float64, one process: tests/reference/hybrid_ref.py (Python from docs/model.md, no shared
             code) for the log-probs and the loss; the gradient is the naive full-sequence run's
             (--strategy naive --grad-mode full), which the finite differences check against the loss
  loss       the naive float64 run's exact loss at every weights file listed in --weights
The batch file is a longstraw-train rollouts line already.  Programs: $LONGSTRAW_TRAIN (default: the
build tree's trainer/longstraw-train under $LONGSTRAW_BUILD, default ../build), $LONGSTRAW_MPIRUN (mpirun).
Exit: 0, 1 a trainer run failed (its log named), 2 usage."""

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
CONFIG = os.path.join(SRC, "configs", "hybrid-tiny.json")
REFERENCE = os.path.join(SRC, "tests", "reference", "hybrid_ref.py")
OBJECTIVE = ["--temperature", "0.9", "--epsilon", "0.2", "--beta", "0.04"]
FIXED = ["--steps", "1", "--train-mode", "lora", "--lora-init", "random", "--page-size", "8",
         "--capture-chunk", "12", "--quiet"]


def trainer():
    t = os.environ.get("LONGSTRAW_TRAIN")
    if t:
        return t
    return os.path.join(os.environ.get("LONGSTRAW_BUILD", os.path.join(SRC, "build")), "trainer", "longstraw-train")


def st_write(path, tensors):
    """float64 safetensors of {name: list}, 1-D each."""
    header, off, blobs = {}, 0, []
    for name, vals in tensors.items():
        b = struct.pack("<%dd" % len(vals), *vals)
        header[name] = {"dtype": "F64", "shape": [len(vals)], "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
    os.replace(path + ".tmp", path)


def write_json(path, doc):
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)


def train(args, log, cp=1):
    cmd = [trainer(), "--config", CONFIG] + FIXED + OBJECTIVE + args
    if cp > 1:
        mpi = [os.environ.get("LONGSTRAW_MPIRUN", "mpirun"), "--oversubscribe", "--bind-to", "none"]
        if os.geteuid() == 0:
            mpi.append("--allow-run-as-root")
        cmd = mpi + ["-np", str(cp)] + cmd
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if rc != 0:
        raise RuntimeError("%s exited %d (its output: %s)" % (" ".join(cmd[:3]), rc, log))


def exact_loss(log):
    with open(log) as f:
        found = re.findall(r"\n  exact loss (\S+) \(last step\)", "\n" + f.read())
    if len(found) != 1:
        raise RuntimeError("%s: %d lines '  exact loss X (last step)', expected 1" % (log, len(found)))
    return float(found[0])


def logprobs_of(batch_json):
    with open(batch_json) as f:
        doc = json.load(f)
    return {"member.%d" % i: [float(v) for v in m] for i, m in enumerate(doc["old_logprobs"])}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", required=True, choices=["init", "run", "reference", "loss"])
    p.add_argument("--cp", type=int, default=1)
    p.add_argument("--dtype", default="f64", choices=["f64", "f32"])
    p.add_argument("--grad-mode", default="full", choices=["full", "detached"])
    p.add_argument("--fault", default="")
    p.add_argument("--weights", required=True)
    p.add_argument("--batch", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", default="1")
    try:
        a = p.parse_args()
    except SystemExit:
        return 2
    out = a.out
    os.makedirs(out, exist_ok=True)
    fault = ["--fault", a.fault] if a.fault else []
    try:
        if a.mode == "init":
            train(["--rollouts", a.batch, "--dtype", "f64", "--strategy", "naive", "--seed", a.seed,
                   "--save-init", os.path.join(out, "weights.safetensors"), "--out", os.path.join(out, "init-run")],
                  os.path.join(out, "init.log"))
        elif a.mode == "run":
            with open(a.batch) as f:
                line = json.loads(f.readline())
            score = {k: line[k] for k in ("prompt", "responses", "rewards")}
            with open(os.path.join(out, "score.jsonl"), "w") as f:
                f.write(json.dumps(score) + "\n")
            common = ["--dtype", a.dtype, "--load", a.weights, "--grad-mode", a.grad_mode] + fault
            train(common + ["--rollouts", os.path.join(out, "score.jsonl"),
                            "--dump-batch", os.path.join(out, "score-batch.json"),
                            "--out", os.path.join(out, "score-run")], os.path.join(out, "score.log"), a.cp)
            st_write(os.path.join(out, "logprobs.safetensors"), logprobs_of(os.path.join(out, "score-batch.json")))
            train(common + ["--rollouts", a.batch, "--dump-grads", os.path.join(out, "grads.safetensors"),
                            "--save", os.path.join(out, "params.safetensors"), "--out", os.path.join(out, "run")],
                  os.path.join(out, "grad.log"), a.cp)
            write_json(os.path.join(out, "loss.json"), {"loss": exact_loss(os.path.join(out, "grad.log"))})
        elif a.mode == "reference":
            train(["--rollouts", a.batch, "--dtype", "f64", "--load", a.weights, "--strategy", "naive",
                   "--grad-mode", "full", "--dump-batch", os.path.join(out, "naive-batch.json"),
                   "--dump-grads", os.path.join(out, "grads.safetensors"), "--out", os.path.join(out, "naive-run")],
                  os.path.join(out, "naive.log"))
            ref = os.path.join(out, "hybrid_ref.json")
            with open(os.path.join(out, "hybrid_ref.log"), "w") as f:
                rc = subprocess.call([sys.executable, REFERENCE, a.weights, os.path.join(out, "naive-batch.json"),
                                      "--json", ref], stdout=f, stderr=subprocess.STDOUT)
            if rc != 0:
                raise RuntimeError("%s exited %d (its output: %s/hybrid_ref.log)" % (REFERENCE, rc, out))
            with open(ref) as f:
                doc = json.load(f)
            st_write(os.path.join(out, "logprobs.safetensors"),
                     {"member.%d" % i: [float(v) for v in m] for i, m in enumerate(doc["policy"])})
            write_json(os.path.join(out, "loss.json"), {"loss": float(doc["loss"])})
        else:
            with open(a.weights) as f:
                files = [ln.strip() for ln in f if ln.strip()]
            losses = []
            for k, w in enumerate(files):
                log = os.path.join(out, "loss-%d.log" % k)
                shutil.rmtree(os.path.join(out, "loss-run"), ignore_errors=True)  # a run directory is never reused
                train(["--rollouts", a.batch, "--dtype", "f64", "--load", w, "--strategy", "naive",
                       "--out", os.path.join(out, "loss-run")], log)
                losses.append(exact_loss(log))
                os.remove(log)
            write_json(os.path.join(out, "losses.json"), {"losses": losses})
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        print("longstraw-train adapter: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
