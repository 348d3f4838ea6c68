#!/usr/bin/python3
"""A stand-in trainer for longstraw-parity --adapter (tests/parity/test_parity_adapter.c).

The protocol's four modes (docs/parity.md, "Adapters") on a model small enough
to differentiate by hand: logits of a response token = E[previous token] @ W / T
(E: embed.weight [V, D], W: layers.0.w [D, V]), the GRPO loss of docs/model.md
section 4 (clipped ratio against the batch's old log-probs, k3 KL against its
reference log-probs, group-normalised advantages), one SGD step.  "CP N" splits
the response tokens into N contiguous shards whose gradients are summed in
shard order (a different rounding, as a real composition).  Detached mode drops
the gradient that flows through the prompt's last token (the "prompt state").
"DP D" (--dp, data parallelism as DDP replicas of the CP group): member m is
replica m % D's (G % D == 0), each replica's gradient is taken from its members'
tokens alone (its own CP shards) with its loss scaled by D, and the replicas'
gradients are averaged (the DDP all-reduce: their sum in replica order over D);
the run's configuration records dp_ranks D (D > 1).
On a batch of a prompt alone (batch.prompt_only) mode run samples 4 responses
of 3-5 tokens from --seed (member i from its own generator: the same at every
CP and DP size), rewards each by the fraction of its tokens below V/2, scores
its own old log-probs and writes the batch it ran to {out}/batch.json.

--fault (the controls):  local-logits   CP > 1: shards past the first score with
                                         temperature 1 (log-probs wrong)
                         drop-shard     CP > 1: the last shard's gradient is lost
                         scale-grad     every gradient x (1 + 1e-3)
                         undetected     nothing changes (a control that cannot fail)
                         loss-off       the loss reported x 1.01
                         dp-no-scale    DP > 1: the replicas' losses not scaled by D for DDP's
                                         average: the gradient 1/D of the truth
FAKE_BREAK (environment, the hostile tests), in fault-free run mode:
  nofile (writes no grads), nan (a NaN gradient), shape (member.0 one log-prob
  short), crash (exit 3), sleep (sleeps 60 s), badlosses (mode loss: one loss
  too few), objective (records epsilon 0.3), swapped (mode loss: two losses' weights swapped),
  dp-no-scale (every run at DP > 1 as with that fault, unrecorded: the bug in the trainer), nodp
  (--dp ignored: DP 1 run and recorded).
FAKE_MANIFEST=v2: the run manifests' configuration is v2's (the model a free object under config.model).
FAKE_FORMAT=flat: the other forms the protocol accepts, one tensor "logprobs" of every response token in
member order, losses as {"weights": PATH, "loss": X}.
Standard library only."""

import argparse
import hashlib
import json
import math
import os
import struct
import sys
import time

V, D = 16, 3


def st_write(path, tensors, dtype="F64"):
    fmt, size = ("<%dd", 8) if dtype == "F64" else ("<%df", 4)
    header, off, blobs = {}, 0, []
    for name, (shape, vals) in tensors.items():
        b = struct.pack(fmt % len(vals), *vals)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
    os.replace(tmp, path)


def st_read(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        raw = data[8 + n + a:8 + n + b]
        fmt = "<%dd" % (len(raw) // 8) if h["dtype"] == "F64" else "<%df" % (len(raw) // 4)
        out[name] = (h["shape"], list(struct.unpack(fmt, raw)))
    return out


def r32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


class Model:
    def __init__(self, w):
        self.E = w["embed.weight"][1]
        self.W = w["layers.0.w"][1]

    def logits(self, x, temp):
        e = self.E[x * D:(x + 1) * D]
        return [sum(e[k] * self.W[k * V + v] for k in range(D)) / temp for v in range(V)]


def logprob(m, x, y, temp):
    z = m.logits(x, temp)
    mx = max(z)
    lse = mx + math.log(sum(math.exp(a - mx) for a in z))
    return z[y] - lse, z, lse


def tokens(batch):
    """(member, position, previous token, token) of every response token."""
    out = []
    for i, resp in enumerate(batch["responses"]):
        prev = batch["prompt"][-1]
        for t, y in enumerate(resp):
            out.append((i, t, prev, y))
            prev = y
    return out


def advantages(r):
    mu = sum(r) / len(r)
    sd = math.sqrt(sum((x - mu) ** 2 for x in r) / len(r))
    return [(x - mu) / (sd + 1e-6) for x in r]


def run(w, batch, cfg, cp=1, detached=False, fault="", want_grad=True, dp=1):
    """log-probs per member, the loss, the gradient (dict of flat lists)."""
    m = Model(w)
    temp, eps, beta = cfg["temperature"], cfg["epsilon"], cfg["beta"]
    G = len(batch["responses"])
    adv = advantages(batch["rewards"])
    old, ref = batch.get("old_logprobs"), batch.get("ref_logprobs")
    lps = [[0.0] * len(r) for r in batch["responses"]]
    loss = 0.0
    gE, gW = [0.0] * (V * D), [0.0] * (D * V)
    for d in range(dp):  # the replicas (DP 1: one), each a CP group over its members' tokens
        rE, rW = [0.0] * (V * D), [0.0] * (D * V)
        rloss = replica(m, batch, cfg, [t for t in tokens(batch) if t[0] % dp == d], cp, detached, fault, want_grad,
                        G, adv, old, ref, lps, rE, rW)
        loss += rloss
        scale = 1.0 if fault == "dp-no-scale" else float(dp)  # DDP averages: each replica's loss x D
        for j in range(V * D):
            gE[j] += rE[j] * scale
            gW[j] += rW[j] * scale
    gE = [g / dp for g in gE]
    gW = [g / dp for g in gW]
    if fault == "scale-grad":
        gE = [g * (1 + 1e-3) for g in gE]
        gW = [g * (1 + 1e-3) for g in gW]
    if fault == "loss-off":
        loss *= 1.01
    return lps, loss, {"embed.weight": gE, "layers.0.w": gW}


def replica(m, batch, cfg, toks, cp, detached, fault, want_grad, G, adv, old, ref, lps, gE, gW):
    """One CP group over toks: its log-probs into lps, its gradient summed into gE, gW; its loss."""
    temp, eps, beta = cfg["temperature"], cfg["epsilon"], cfg["beta"]
    n = len(toks)
    shards = [toks[k * n // cp:(k + 1) * n // cp] for k in range(cp)]
    loss = 0.0
    for k, shard in enumerate(shards):
        sE, sW, sl = [0.0] * (V * D), [0.0] * (D * V), 0.0
        if fault == "drop-shard" and cp > 1 and k == cp - 1:
            skip_grad = True
        else:
            skip_grad = False
        for (i, t, x, y) in shard:
            tt = 1.0 if fault == "local-logits" and cp > 1 and k > 0 else temp
            lp, z, lse = logprob(m, x, y, tt)
            lps[i][t] = lp
            o = old[i][t] if old else lp
            rf = ref[i][t] if ref else lp
            rho = math.exp(lp - o)
            a = adv[i]
            lo, hi = 1 - eps, 1 + eps
            clipped = min(max(rho, lo), hi)
            un = rho * a
            cl = clipped * a
            kl = math.exp(rf - lp) - (rf - lp) - 1
            scale = 1.0 / (G * len(batch["responses"][i]))
            sl += -scale * (min(un, cl) - beta * kl)
            if not want_grad or skip_grad:
                continue
            dmin = un if (un <= cl or clipped == rho) else 0.0
            dkl = -math.exp(rf - lp) + 1
            dlp = -scale * (dmin - beta * dkl)
            p = [math.exp(zz - lse) for zz in z]
            dz = [dlp * ((1.0 if v == y else 0.0) - p[v]) / tt for v in range(V)]
            e = m.E[x * D:(x + 1) * D]
            for kk in range(D):
                for v in range(V):
                    sW[kk * V + v] += e[kk] * dz[v]
            if not (detached and t == 0):
                for kk in range(D):
                    sE[x * D + kk] += sum(m.W[kk * V + v] * dz[v] for v in range(V))
        for j in range(V * D):
            gE[j] += sE[j]
            gW[j] += sW[j]
        loss += sl
    return loss


def manifest(out, cfg, a, sampled=False):
    digest = hashlib.sha256(b"fake-trainer-build-1").hexdigest()
    conf = {"family": a.family, "vocab": V, "d_model": D, "n_layers": 1, "objective": "grpo",
            "epsilon": 0.3 if os.environ.get("FAKE_BREAK") == "objective" and not a.fault else cfg["epsilon"],
            "beta": cfg["beta"], "temperature": cfg["temperature"], "train_mode": "full",
            "grad_mode": a.grad_mode, "strategy": "longstraw", "dtype": a.dtype, "cp_ranks": a.cp,
            **({"dp_ranks": a.dp} if a.dp > 1 else {}),
            "faults": [a.fault] if a.fault else [],
            # the run's path (docs/contract.md section 2): the batch gives the responses, old and reference
            # log-probs; "CP N" splits unevenly
            "paths": {"responses": ["sampled" if sampled else "given"],
                      "old_logprobs": ["computed" if sampled else "given"], "reference": ["none" if sampled else "given"],
                      "prompt_groups": ["one"], "prefix": ["fresh"], "start": ["fresh"],
                      "shards": ["one" if a.cp == 1 else "uneven"], "pages": ["aligned"], "chunks": ["aligned"],
                      "task": ["none"], "replay": ["taped"], "state_tier": ["device"]}}
    if os.environ.get("FAKE_MANIFEST") == "v2":  # docs/contract.md section 2: the model under config.model
        model = {k: conf.pop(k) for k in ("family", "vocab", "d_model")}
        model["init"] = "gauss(0, 1)"
        model["scale"] = 1e-6
        conf.update({"model": model, "group": 3, "steps_requested": 1, "options": {"lr": 0.01}})
    os.makedirs(out, exist_ok=True)
    build = {"build_digest": digest}
    if os.environ.get("FAKE_BREAK") == "build" and a.cp > 1 and not a.fault:  # another build at CP > 1
        build = {"build_digest": hashlib.sha256(b"fake-trainer-build-2").hexdigest(), "kernel_isa": "avx512"}
    if os.environ.get("FAKE_BREAK") == "artifacts":  # a v2 identity whose artifact has no role
        build["artifacts"] = [{"name": "fake"}]
    doc = {"_type": "https://in-toto.io/Statement/v1", "predicateType": "urn:longstraw:predicate:run-manifest:v1",
           "predicate": {"build": build, "config": conf}}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(doc, f)


def main():
    p = argparse.ArgumentParser()
    for k in ("--mode", "--cp", "--dp", "--dtype", "--grad-mode", "--fault", "--weights", "--batch", "--out", "--seed",
              "--family"):
        p.add_argument(k, default="")
    p.add_argument("--epsilon", type=float, default=0.2)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--temperature", type=float, default=0.9)
    a = p.parse_args()
    a.cp = int(a.cp or 1)
    a.dp = int(a.dp or 1)
    if os.environ.get("FAKE_BREAK") == "nodp":
        a.dp = 1
    if os.environ.get("FAKE_LAUNCHES"):  # one line per launch (O_APPEND: whole lines from parallel runs)
        with open(os.environ["FAKE_LAUNCHES"], "a") as f:
            f.write(a.mode + "\n")
    brk = os.environ.get("FAKE_BREAK", "") if a.mode == "run" and not a.fault else ""
    if brk == "crash":
        return 3
    if brk == "sleep":
        time.sleep(60)
    cfg = {"temperature": a.temperature, "epsilon": a.epsilon, "beta": a.beta}
    with open(a.batch) as f:
        batch = json.loads(f.readline())
    if a.mode == "init":
        import random
        rng = random.Random(int(a.seed or 1))
        st_write(os.path.join(a.out, "weights.safetensors"),
                 {"embed.weight": ([V, D], [rng.gauss(0, 1) for _ in range(V * D)]),
                  "layers.0.w": ([D, V], [rng.gauss(0, 1) for _ in range(D * V)])})
        return 0
    if a.mode == "loss":
        with open(a.weights) as f:
            files = [ln.strip() for ln in f if ln.strip()]
        losses = [run(st_read(w), batch, cfg, want_grad=False)[1] for w in files]
        if os.environ.get("FAKE_BREAK") == "badlosses":
            losses = losses[:-1]
        if os.environ.get("FAKE_FORMAT") == "flat" or os.environ.get("FAKE_BREAK") == "swapped":
            losses = [{"weights": w, "loss": x} for w, x in zip(files, losses)]
        if os.environ.get("FAKE_BREAK") == "swapped":
            losses[0]["weights"], losses[1]["weights"] = losses[1]["weights"], losses[0]["weights"]
        with open(os.path.join(a.out, "losses.json"), "w") as f:
            json.dump({"losses": losses}, f)
        return 0
    w = st_read(a.weights)
    ref = a.mode == "reference"
    sampled = not ref and "responses" not in batch
    if sampled:  # a batch of a prompt alone: sample, reward, score the old log-probs (batch.prompt_only)
        import random
        seed = int(a.seed or 1)
        resp = []
        for i in range(4):
            g = random.Random(seed * 1009 + i)
            resp.append([g.randrange(V) for _ in range(3 + i % 3)])
        batch = {"prompt": batch["prompt"], "responses": resp,
                 "rewards": [sum(t < V // 2 for t in x) / len(x) for x in resp]}
        batch["old_logprobs"] = run(w, batch, cfg, want_grad=False)[0]
        with open(os.path.join(a.out, "batch.json"), "w") as f:
            json.dump(batch, f)
    if not ref and len(batch["responses"]) % a.dp:
        print(f"--dp {a.dp}: the batch's {len(batch['responses'])} responses do not split over the replicas",
              file=sys.stderr)
        return 2
    fault = "" if ref else a.fault
    if not ref and not a.fault and a.dp > 1 and os.environ.get("FAKE_BREAK") == "dp-no-scale":
        fault = "dp-no-scale"  # the bug in the trainer (its configuration records no fault)
    lps, loss, grads = run(w, batch, cfg, cp=1 if ref else a.cp, detached=a.grad_mode == "detached",
                           fault=fault, dp=1 if ref else a.dp)
    f32 = a.dtype == "f32" and not ref
    rnd = r32 if f32 else (lambda v: v)
    dt = "F32" if f32 else "F64"
    if brk == "shape":
        lps[0] = lps[0][:-1]
    if os.environ.get("FAKE_FORMAT") == "flat":
        flat = [rnd(v) for l in lps for v in l]
        st_write(os.path.join(a.out, "logprobs.safetensors"), {"logprobs": ([len(flat)], flat)}, dt)
    else:
        st_write(os.path.join(a.out, "logprobs.safetensors"),
                 {"member.%d" % i: ([len(l)], [rnd(v) for v in l]) for i, l in enumerate(lps)}, dt)
    with open(os.path.join(a.out, "loss.json"), "w") as f:
        json.dump({"loss": rnd(loss)}, f)
    if brk == "nofile":
        return 0
    if brk == "nan":
        grads["layers.0.w"][3] = float("nan")
    shapes = {"embed.weight": [V, D], "layers.0.w": [D, V]}
    st_write(os.path.join(a.out, "grads.safetensors"), {k: (shapes[k], [rnd(v) for v in g]) for k, g in grads.items()}, dt)
    if ref:
        return 0
    lr = 1e-2
    st_write(os.path.join(a.out, "params.safetensors"),
             {k: (shapes[k], [rnd(x - lr * g) for x, g in zip(w[k][1], grads[k])]) for k in grads}, dt)
    manifest(os.path.join(a.out, "run"), cfg, a, sampled)
    return 0


if __name__ == "__main__":
    sys.exit(main())
