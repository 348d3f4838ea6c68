#!/usr/bin/python3
"""End-to-end reference check of the hybrid family (ctest hybrid_reference).

usage: run_hybrid_ref.py SRC_DIR TRAINER [--keep]

Runs longstraw-train in float64 (random LoRA-B, so the policy differs from the reference
policy and the KL term is not zero) on one external rollout group of G = 4 members with
unequal response lengths, a prompt of P = 173 tokens, pages of 16 tokens and capture
chunks of 40 (so the prompt spans 11 pages and 5 chunks, the chunks cut pages, and the
response branches read the paged prompt through the attention merge), and lets
hybrid_ref.py recompute everything from docs/model.md alone. For each of two weight sets (the
trainer's initial weights, and the same with every RMSNorm weight perturbed and loaded
back with --load, since the initial norm weights 0 / 1 would not tell 1+w from w):

  score    the trainer scores the old log-probs itself (ratio 1):
           old == policy, ref == reference, advantages, loss;
  paged    old log-probs supplied in the rollouts file, set to the reference policy's own
           log-probs moved by -0.6 ... +0.6, so the ratios are far from 1 and the clip
           engages for both signs of the advantage: the run's weights, old == supplied,
           ref, advantages, loss;
  unpaged  the same batch with --page-size 1000 --capture-chunk 0 (one page, one chunk);
  and two conditions on the batch itself: the token census covers every branch of the
  clipped objective, and the adapters move the log-probs (KL term non-zero).

Every check is counted; fewer or more than EXPECTED_CHECKS, a missing input (the loss
line, a dump field) or a disagreement fails the run.
exit: 0 all agree, 1 a mismatch or a skipped check, 2 bad usage or a trainer failure.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hybrid_ref as hr  # noqa: E402

P = 173
PAGE, CHUNK = 16, 40
RESPONSE_LENS = (3, 6, 4, 5)
REWARDS = (1.0, 0.0, 0.5, 0.25)
# old = policy + delta: rho = exp(-delta) = 1.82, 0.55, 0.95, 1.49, 0.67, 1.11
DELTAS = (-0.6, 0.6, 0.05, -0.4, 0.4, -0.1)
CHECKS_PER_SET = 4 + 5 + 5 + 2
EXPECTED_CHECKS = 2 * CHECKS_PER_SET + 1  # + "norm weights perturbed" on the second set


class TrainerFailed(Exception):
    pass


def lcg_tokens(n, seed, vocab):
    state = seed
    out = []
    for _ in range(n):
        state = (1103515245 * state + 12345) & 0x7FFFFFFF
        out.append((state >> 8) % vocab)
    return out


def write_rollouts(path, prompt, responses, rewards, old=None):
    doc = {"prompt": prompt, "responses": responses, "rewards": list(rewards)}
    if old is not None:
        doc["old_logprobs"] = old
    with open(path, "w") as f:
        # repr-exact floats: the trainer must read back exactly these old log-probs
        f.write(json.dumps(doc, separators=(",", ":")) + "\n")


def supplied_old(policy):
    old = []
    for i, lp in enumerate(policy):
        row = []
        for t, v in enumerate(lp):
            o = v + DELTAS[(t + 2 * i) % len(DELTAS)]
            row.append(o if o < 0.0 else -1e-3)  # a log-prob is <= 0
        old.append(row)
    return old


def main(argv):
    if len(argv) < 3:
        sys.stderr.write("usage: %s SRC_DIR TRAINER [--keep]\n" % argv[0])
        return 2
    src, trainer = argv[1], argv[2]
    keep = "--keep" in argv[3:]
    config = os.path.join(src, "configs", "hybrid-tiny.json")
    if not os.access(trainer, os.X_OK):
        sys.stderr.write("run_hybrid_ref: trainer %s not built\n" % trainer)
        return 2
    tmp = tempfile.mkdtemp(prefix="hybrid_ref.")
    t_start = time.time()
    rc = 1
    try:
        rc = drive(tmp, trainer, config)
    except TrainerFailed as e:
        sys.stderr.write("run_hybrid_ref: %s\n" % e)
        rc, keep = 2, True
    except hr.Usage as e:
        sys.stderr.write("run_hybrid_ref: FAIL: %s\n" % e)
        rc, keep = 1, True
    except hr.Mismatch as e:
        sys.stderr.write("run_hybrid_ref: FAIL: %s\n" % e)
        rc, keep = 1, True
    finally:
        print("run_hybrid_ref: %.1f s" % (time.time() - t_start))
        if keep or rc != 0:
            sys.stderr.write("run_hybrid_ref: kept %s\n" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return rc


def drive(tmp, trainer, config):
    with open(config) as f:
        vocab = json.load(f)["vocab"]
    prompt = lcg_tokens(P, 7, vocab)
    responses = [lcg_tokens(n, 100 + i, vocab) for i, n in enumerate(RESPONSE_LENS)]
    roll0 = os.path.join(tmp, "rollouts-score.jsonl")
    write_rollouts(roll0, prompt, responses, REWARDS)

    def train(name, rollouts, page, chunk, load=None):
        """One step; returns (save-init weights, batch dump, stdout log)."""
        w, b, log = (os.path.join(tmp, name + ext) for ext in (".safetensors", ".json", ".log"))
        cmd = [trainer, "--config", config, "--rollouts", rollouts, "--dtype", "f64", "--steps", "1",
               "--lora-init", "random", "--train-mode", "lora", "--temperature", "0.9",
               "--page-size", str(page), "--capture-chunk", str(chunk),
               "--out", os.path.join(tmp, "run-" + name), "--save-init", w, "--dump-batch", b, "--quiet"]
        if load:
            cmd += ["--load", load]
        with open(log, "w") as out:
            res = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
        with open(log) as f:
            text = f.read()
        sys.stdout.write(text)
        if res.returncode != 0:
            raise TrainerFailed("longstraw-train failed (%s, exit %d): %s" % (name, res.returncode, " ".join(cmd)))
        return w, b, log

    checks = hr.Checks()
    init_weights = None
    for wset in ("init", "pert"):
        print("== %s weights: P=%d, pages of %d, capture chunks of %d, R=%s"
              % ("initial" if wset == "init" else "perturbed RMSNorm", P, PAGE, CHUNK, list(RESPONSE_LENS)))
        load = None
        if wset == "pert":
            load = os.path.join(tmp, "perturbed.safetensors")
            hr.perturb_norms(init_weights, load, 7)
        w, b, log = train(wset + "-score", roll0, PAGE, CHUNK, load)
        if wset == "init":
            init_weights = w
        batch = hr.load_batch(b)
        ref = hr.Reference(w, batch)
        if wset == "pert":
            checks.condition("pert norm weights perturbed", ref.perturbed,
                             "some RMSNorm weight is off its initial value" if ref.perturbed else
                             "every RMSNorm weight is at its initial value (did --load take effect?)")
        ref.check_run(checks, wset + "/score", batch, log)
        old = supplied_old(ref.policy)
        roll1 = os.path.join(tmp, wset + "-rollouts-supplied.jsonl")
        write_rollouts(roll1, prompt, responses, REWARDS, old)
        census = None
        for run, page, chunk in (("paged", PAGE, CHUNK), ("unpaged", 1000, 0)):
            w2, b2, log2 = train("%s-%s" % (wset, run), roll1, page, chunk, w)
            loss, census = ref.check_run(checks, "%s/%s" % (wset, run), hr.load_batch(b2), log2, old, w2)
            print("hybrid_ref: %s/%s loss %.17g" % (wset, run, loss))
        need = ("clip_pos", "clip_neg", "open_pos", "open_neg", "inside")
        checks.condition(wset + " clip census", all(census[k] > 0 for k in need),
                         "tokens per branch %s" % {k: census[k] for k in need})
        checks.condition(wset + " policy != reference", ref.gap > 1e-3 and census["max_kl"] > 1e-6,
                         "max |policy - reference| log-prob %.3g, max KL_t %.3g" % (ref.gap, census["max_kl"]))
    checks.finish(EXPECTED_CHECKS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
