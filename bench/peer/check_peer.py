#!/usr/bin/python3
"""Proves bench/peer/hybrid_torch.py is the trainer's model and step (ctest peer_matches_trainer).

usage: check_peer.py TRAINER SRC_DIR [--keep] [--dtype f64|f32] [--config NAME]

Runs longstraw-train for one GRPO step of configs/NAME.json (default hybrid-tiny; hybrid-wide
for the benchmarks' wide rows) at a small prompt (P = 64 and, so that
the chunked GDN form crosses several chunks and the attention several query blocks, P = 150),
random LoRA-B (policy != reference, KL non-zero), --grad-mode full (the gradient of the
full-sequence computation, which is what the peer differentiates), writing --save-init,
--dump-batch and --dump-grads; then runs the peer on the same weights and batch in both
modes (eager and ckpt; ckpt with small attention blocks and GDN chunks) and compares:
  policy log-probs  with the batch's old_logprobs (the trainer scored them with the policy),
  ref log-probs     with the batch's ref_logprobs,
  advantages        with the batch's,
  loss              with the trainer's "  exact loss X (last step)" line,
  gradients         every trainable tensor with the trainer's --dump-grads, relative to
                    the tensor's largest |gradient|;
and, as its own control, the chunked GDN recurrence against the token-by-token recurrence of
docs/model.md 1.1 (random inputs, several chunk sizes). The second prompt supplies old
log-probs moved off the policy (-0.6 ... +0.6) so the clip engages for both signs.
Tolerance 1e-9 in f64 (the default); in f32 1e-4 (gradients 1e-3 of the tensor's largest).
Every check prints its largest error.
exit: 0 all agree, 1 a mismatch, 2 bad usage or a failed run.
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hybrid_torch as ht  # noqa: E402

DELTAS = (-0.6, 0.6, 0.05, -0.4, 0.4, -0.1)
LOSS_LINE = re.compile(r"^  exact loss (\S+) \(last step\)$")


class Failed(Exception):
    pass


class Checks:
    def __init__(self, tol):
        self.tol = tol
        self.ran = 0
        self.bad = []

    def close(self, name, mine, theirs, tol=None, scale=None):
        """max |mine - theirs| (divided by scale when given) <= tol; NaN fails."""
        tol = self.tol if tol is None else tol
        a = torch.as_tensor(mine, dtype=torch.float64).flatten()
        b = torch.as_tensor(theirs, dtype=torch.float64).flatten()
        if a.shape != b.shape or a.numel() == 0:
            raise Failed("%s: shapes %s vs %s" % (name, list(a.shape), list(b.shape)))
        err = (a - b).abs().max().item()
        if scale is not None:
            err /= scale
        ok = err <= tol
        self.ran += 1
        print("check_peer: %-44s max err %.3g over %d value(s) (tol %g)%s"
              % (name, err, a.numel(), tol, "" if ok else "  FAIL"))
        if not ok:
            self.bad.append(name)


def flat(rows):
    return [v for r in rows for v in r]


def token_recurrence(q, k, v, g, beta):
    """docs/model.md 1.1 step 6, token by token: the control for the chunked form."""
    H, T, dk = k.shape
    dv = v.shape[-1]
    S = torch.zeros(H, dk, dv, dtype=q.dtype)
    out = []
    for t in range(T):
        Sh = g[:, t].exp()[:, None, None] * S
        u = torch.einsum("hkv,hk->hv", Sh, k[:, t])
        delta = beta[:, t, None] * (v[:, t] - u)
        S = Sh + k[:, t, :, None] * delta[:, None, :]
        out.append(torch.einsum("hkv,hk->hv", S, q[:, t]))
    return torch.stack(out, 1)


def check_gdn(checks, dtype):
    gen = torch.Generator().manual_seed(5)
    H, T, dk, dv = 3, 77, 8, 5
    q = torch.nn.functional.normalize(torch.randn(H, T, dk, generator=gen, dtype=dtype), dim=-1) * dk ** -0.5
    k = torch.nn.functional.normalize(torch.randn(H, T, dk, generator=gen, dtype=dtype), dim=-1)
    v = torch.randn(H, T, dv, generator=gen, dtype=dtype)
    g = -torch.rand(H, T, generator=gen, dtype=dtype) * 2.0
    beta = torch.rand(H, T, generator=gen, dtype=dtype)
    ref = token_recurrence(q, k, v, g, beta)
    for chunk in (1, 16, 64):
        checks.close("gdn chunked (chunk %d) vs token recurrence" % chunk,
                     ht.gated_delta_chunked(q, k, v, g, beta, chunk), ref)


def trainer_loss(text):
    found = [m.group(1) for m in map(LOSS_LINE.match, text.splitlines()) if m]
    if len(found) != 1:
        raise Failed("trainer log has %d '  exact loss X (last step)' lines, expected 1" % len(found))
    return float(found[0])


CONFIG = "hybrid-tiny"  # --config


def run_trainer(trainer, src, tmp, tag, P, dtype, rollouts=None):
    w, b, g = (os.path.join(tmp, tag + s) for s in (".w.safetensors", ".batch.json", ".grads.safetensors"))
    cmd = [trainer, "--config", os.path.join(src, "configs", CONFIG + ".json"), "--dtype", dtype,
           "--steps", "1", "--seed", "3", "--group", "4", "--lora-init", "random", "--train-mode", "lora",
           "--grad-mode", "full", "--temperature", "0.9", "--page-size", "16", "--capture-chunk", "48",
           "--out", os.path.join(tmp, tag + ".run"), "--save-init", w, "--dump-batch", b, "--dump-grads", g,
           "--quiet"]
    if rollouts:
        cmd += ["--rollouts", rollouts]
    else:
        cmd += ["--prompt-len", str(P), "--response-len", "6"]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0:
        sys.stdout.write(res.stdout)
        raise Failed("longstraw-train failed (exit %d): %s" % (res.returncode, " ".join(cmd)))
    return w, b, g, trainer_loss(res.stdout)


def run_peer(tmp, tag, w, b, mode, dtype):
    out, gr = os.path.join(tmp, tag + ".peer.json"), os.path.join(tmp, tag + ".peer.grads.safetensors")
    cmd = [sys.executable, os.path.join(HERE, "hybrid_torch.py"), "--weights", w, "--batch", b,
           "--mode", mode, "--dtype", dtype, "--threads", "1", "--json", out, "--dump-grads", gr, "--quiet"]
    if mode == "ckpt":
        cmd += ["--block", "16", "--chunk", "8"]  # many query blocks and GDN chunks at a small P
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0:
        sys.stdout.write(res.stdout)
        raise Failed("hybrid_torch.py failed (exit %d): %s" % (res.returncode, " ".join(cmd)))
    with open(out) as f:
        return json.load(f), ht.st_load(gr)


def compare(checks, tag, batch, tloss, tgrads, peer, pgrads, policy):
    """policy: the trainer's policy log-probs (a batch's old_logprobs that the trainer scored)."""
    checks.close(tag + " policy log-probs", flat(peer["policy"]), flat(policy))
    checks.close(tag + " ref log-probs", flat(peer["ref_policy"]), flat(batch["ref_logprobs"]))
    checks.close(tag + " advantages", peer["advantages"], batch["advantages"])
    checks.close(tag + " loss", [peer["loss"]], [tloss], scale=max(1.0, abs(tloss)))
    if sorted(tgrads) != sorted(pgrads):
        raise Failed("%s: gradient names differ: trainer %d tensors, peer %d" % (tag, len(tgrads), len(pgrads)))
    worst, where = 0.0, ""
    for n in sorted(tgrads):
        scale = max(tgrads[n].abs().max().item(), 1e-30)
        e = (pgrads[n].double() - tgrads[n].double()).abs().max().item() / scale
        if not e <= worst:
            worst, where = e, n
    gtol = checks.gtol
    ok = worst <= gtol
    checks.ran += 1
    print("check_peer: %-44s max err %.3g (relative to the tensor's max |g|, worst %s; %d tensors; tol %g)%s"
          % (tag + " gradients", worst, where, len(tgrads), gtol, "" if ok else "  FAIL"))
    if not ok:
        checks.bad.append(tag + " gradients")


def drive(trainer, src, tmp, dtype):
    tol = 1e-9 if dtype == "f64" else 1e-4
    checks = Checks(tol)
    # f32 gradients sum thousands of rounded products in another order than the trainer's
    checks.gtol = tol if dtype == "f64" else 1e-3
    check_gdn(checks, torch.float64 if dtype == "f64" else torch.float32)
    # 1: the trainer rolls out and scores (ratio 1), P = 64
    w, b, g, loss = run_trainer(trainer, src, tmp, "p64", 64, dtype)
    with open(b) as f:
        batch = json.load(f)
    tg = ht.st_load(g)
    for mode in ("eager", "ckpt"):
        peer, pg = run_peer(tmp, "p64-" + mode, w, b, mode, dtype)
        compare(checks, "P=64 %s:" % mode, batch, loss, tg, peer, pg, batch["old_logprobs"])
    # 2: P = 150, old log-probs supplied off the policy so the clip engages for both signs
    roll = os.path.join(tmp, "p150.rollouts.jsonl")
    gen = torch.Generator().manual_seed(11)
    prompt = torch.randint(0, 256, (150,), generator=gen).tolist()
    responses = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (3, 6, 4, 5)]
    rewards = [1.0, 0.0, 0.5, 0.25]
    with open(roll, "w") as f:
        f.write(json.dumps({"prompt": prompt, "responses": responses, "rewards": rewards}) + "\n")
    w, b, g, _ = run_trainer(trainer, src, tmp, "p150-score", 0, dtype, roll)
    with open(b) as f:
        pol = json.load(f)["old_logprobs"]
    old = [[min(v + DELTAS[(t + 2 * i) % len(DELTAS)], -1e-3) for t, v in enumerate(r)] for i, r in enumerate(pol)]
    with open(roll, "w") as f:
        f.write(json.dumps({"prompt": prompt, "responses": responses, "rewards": rewards, "old_logprobs": old}) + "\n")
    w, b, g, loss = run_trainer(trainer, src, tmp, "p150", 0, dtype, roll)
    with open(b) as f:
        batch = json.load(f)
    tg = ht.st_load(g)
    adv = batch["advantages"]
    clipped = sum(1 for i, r in enumerate(pol) for t, v in enumerate(r)
                  if (adv[i] > 0 and math.exp(v - old[i][t]) > 1.2) or (adv[i] < 0 and math.exp(v - old[i][t]) < 0.8))
    if clipped == 0:
        raise Failed("P=150: no token takes the clipped branch; the supplied old log-probs do not exercise it")
    for mode in ("eager", "ckpt"):
        peer, pg = run_peer(tmp, "p150-" + mode, w, b, mode, dtype)
        compare(checks, "P=150 %s:" % mode, batch, loss, tg, peer, pg, pol)
        checks.close("P=150 %s: old log-probs as supplied" % mode, flat(peer["old"]), flat(batch["old_logprobs"]),
                     tol=0.0 if dtype == "f64" else 1e-6)  # the f32 trainer holds them rounded
    print("check_peer: P=150: %d token(s) on the clipped branch" % clipped)
    expected = 3 + 2 * 5 + 2 * 6
    if checks.ran != expected:
        raise Failed("%d checks ran, %d expected" % (checks.ran, expected))
    if checks.bad:
        print("check_peer: FAIL: %s" % ", ".join(checks.bad))
        return 1
    print("check_peer: OK, %d checks" % checks.ran)
    return 0


def main(argv):
    if len(argv) < 3:
        sys.stderr.write("usage: %s TRAINER SRC_DIR [--keep] [--dtype f64|f32] [--config NAME]\n" % argv[0])
        return 2
    trainer, src = argv[1], argv[2]
    rest = argv[3:]
    keep = "--keep" in rest
    dtype = "f64"
    if "--dtype" in rest:
        i = rest.index("--dtype")
        if i + 1 >= len(rest) or rest[i + 1] not in ("f32", "f64"):
            sys.stderr.write("check_peer: --dtype takes f32 or f64\n")
            return 2
        dtype = rest[i + 1]
    if "--config" in rest:
        global CONFIG
        i = rest.index("--config")
        if i + 1 >= len(rest) or not os.path.isfile(os.path.join(src, "configs", rest[i + 1] + ".json")):
            sys.stderr.write("check_peer: --config takes the name of a file in configs/ (hybrid-tiny)\n")
            return 2
        CONFIG = rest[i + 1]
    if not os.access(trainer, os.X_OK):
        sys.stderr.write("check_peer: trainer %s is not an executable\n" % trainer)
        return 2
    tmp = tempfile.mkdtemp(prefix="check_peer.")
    rc = 1
    try:
        rc = drive(trainer, src, tmp, dtype)
    except Failed as e:
        sys.stderr.write("check_peer: %s\n" % e)
        rc = 2
    finally:
        if keep or rc != 0:
            sys.stderr.write("check_peer: kept %s\n" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
