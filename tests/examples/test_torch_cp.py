"""Numeric tests of examples/torch_cp: CP-N against the independent reference, the gradient modes,
and each fault flag breaking the number it should (and the ones it should not staying put).

Run: /usr/bin/python3 tests/examples/test_torch_cp.py   (PYTHONPATH may name longstraw_emit for the
evidence tests; without it they use the repository's python/ and are skipped if that is absent).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EX = os.path.join(ROOT, "examples", "torch_cp")
sys.path.insert(0, EX)

import torch  # noqa: E402

import model as M  # noqa: E402
import reference  # noqa: E402
import safetensors_io as st  # noqa: E402
import train  # noqa: E402

F64_TOL = 1e-10       # float64 against the reference, relative to each tensor's largest entry
F32_LP_TOL = 1e-5     # float32 log-probs against the float64 reference
F32_GRAD_TOL = 1e-4   # float32 gradients against the float64 reference
BROKEN = 1e-3         # a fault must move its number by more than this (relative)


def rel(a, b):
    """Largest |a - b| relative to the largest |b|."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-300))


def worst(A, B, names=None):
    names = names if names is not None else list(B)
    return max((rel(A[n], B[n]), n) for n in names)


def job(batch_, W, **kw):
    j = {"mode": "run", "cp": 1, "dtype": "f64", "grad_mode": "full", "faults": [], "batch": batch_,
         "epsilon": 0.2, "temperature": 1.0, "seed": 1, "group": 4, "response_len": 5,
         "optimizer": "adamw", "lr": 0.01, "weights": W}
    j.update(kw)
    return j


FAULTS = ["zero-state", "skip-dkv-reduce", "decay-grad", "loss-cp-scale", "fake-reduce"]


class TorchCP(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="test_torch_cp-")
        t = cls.tmp.name
        cls.W = M.init_weights(3)
        # 12-token prompt: 11 captured positions, uneven shards at CP-2 (5, 6) and CP-4 (2, 3, 3, 3)
        b = train.default_batch(3, P=12, G=4, R=4)
        cls.wpath = os.path.join(t, "w.safetensors")
        st.save(cls.wpath, cls.W)
        lp0 = reference.compute(cls.wpath, b)[0].tolist()
        g = torch.Generator().manual_seed(5)
        old, k = [], 0
        for y in b["responses"]:       # old log-probs off by up to 0.3: ratios != 1, some clipped
            old.append([lp0[k + i] + float(0.6 * torch.rand(1, generator=g, dtype=torch.float64) - 0.3)
                        for i in range(len(y))])
            k += len(y)
        b["old_logprobs"] = old
        cls.batch = b
        cls.ref_lp, cls.ref_grad, cls.ref_loss = reference.compute(cls.wpath, b)
        cls.names = list(M.param_shapes())
        roll = ("rollout", {"batch": {"prompt": b["prompt"]}, "group": 3, "response_len": 4, "seed": 9})
        cls.jobs = {
            1: [("full", {}), ("detached", {"grad_mode": "detached"}), ("f32", {"dtype": "f32"}), roll],
            2: [("full", {}), ("f32", {"dtype": "f32"}), ("detached", {"grad_mode": "detached"}), roll]
               + [(f, {"faults": [f]}) for f in FAULTS],
            4: [("full", {}), ("detached", {"grad_mode": "detached"})],
        }
        cls.res = {}
        for n, js in cls.jobs.items():
            d = os.path.join(t, f"cp{n}")
            os.makedirs(d)
            out = train.launch(n, [job(b, cls.W, cp=n, **kw) for _, kw in js], d)
            for (name, _), r in zip(js, out):
                cls.res[(n, name)] = r
        # DDP around the CP model: 2 replicas of CP-2 (4 processes), the group's 4 members split over them
        d = os.path.join(t, "dp2cp2")
        os.makedirs(d)
        dp_jobs = [("full", {}), ("detached", {"grad_mode": "detached"}), ("dp-no-scale", {"faults": ["dp-no-scale"]})]
        out = train.launch(4, [job(b, cls.W, cp=2, dp=2, **kw) for _, kw in dp_jobs], d)
        for (name, _), r in zip(dp_jobs, out):
            cls.res[("dp2cp2", name)] = r

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    # ---------------------------------------------------------------- the proof
    def test_full_f64_equals_reference(self):
        for n in (1, 2, 4):
            r = self.res[(n, "full")]
            e_lp = rel(r["logprobs"], self.ref_lp)
            e_g, name = worst(r["grads"], self.ref_grad)
            e_loss = abs(r["loss"] - self.ref_loss) / abs(self.ref_loss)
            print(f"CP-{n} full f64: logprob {e_lp:.2e}, grad {e_g:.2e} ({name}), loss {e_loss:.2e}")
            self.assertLess(e_lp, F64_TOL)
            self.assertLess(e_g, F64_TOL, name)
            self.assertLess(e_loss, F64_TOL)
            self.assertEqual(r["disagree"], 0)
        self.assertGreater(abs(self.ref_loss), 1e-3)   # the loss is not trivially zero

    def test_ddp_around_cp_equals_reference(self):
        """DP-2 x CP-2 (DDP averaging the replay gradients over the replicas, each replica replaying
        half the members): the same log-probs, loss and gradient as the reference; detached equals
        CP-1 detached; dp-no-scale (the losses not scaled for DDP's average) breaks the gradient and
        only it."""
        r = self.res[("dp2cp2", "full")]
        e_g, name = worst(r["grads"], self.ref_grad)
        print(f"DP-2 x CP-2 full f64: logprob {rel(r['logprobs'], self.ref_lp):.2e}, grad {e_g:.2e} ({name})")
        self.assertLess(rel(r["logprobs"], self.ref_lp), F64_TOL)
        self.assertLess(e_g, F64_TOL, name)
        self.assertLess(abs(r["loss"] - self.ref_loss) / abs(self.ref_loss), F64_TOL)
        self.assertEqual(r["disagree"], 0)
        det = self.res[("dp2cp2", "detached")]
        self.assertLess(worst(det["grads"], self.res[(1, "detached")]["grads"])[0], F64_TOL)
        bad = self.res[("dp2cp2", "dp-no-scale")]
        e_bad, _ = worst(bad["grads"], self.ref_grad)
        print(f"dp-no-scale DP-2 x CP-2 grad vs reference {e_bad:.2e}")
        self.assertGreater(e_bad, 0.1)
        self.assertLess(rel(bad["logprobs"], self.ref_lp), F64_TOL)      # the forward is untouched
        self.assertEqual(bad["disagree"], 0)                            # the replicas agree on a wrong gradient

    def test_clip_active_in_batch(self):
        lp = self.ref_lp.tolist()
        flat_old = [x for o in self.batch["old_logprobs"] for x in o]
        ratios = [torch.exp(torch.tensor(a - b)).item() for a, b in zip(lp, flat_old)]
        self.assertTrue(any(abs(x - 1) > 0.2 for x in ratios), ratios)
        self.assertTrue(any(abs(x - 1) < 0.2 for x in ratios), ratios)

    def test_cp_params_equal(self):
        p1 = self.res[(1, "full")]["params"]
        for n in (2, 4):
            e, name = worst(self.res[(n, "full")]["params"], p1)
            self.assertLess(e, 1e-9, f"CP-{n} params vs CP-1: {e} ({name})")

    def test_f32_within_tolerance(self):
        for n in (1, 2):
            r = self.res[(n, "f32")]
            self.assertEqual(r["grads"]["embed.weight"].dtype, torch.float32)
            e_lp = rel(r["logprobs"], self.ref_lp)
            e_g, name = worst(r["grads"], self.ref_grad)
            print(f"CP-{n} full f32: logprob {e_lp:.2e}, grad {e_g:.2e} ({name})")
            self.assertLess(e_lp, F32_LP_TOL)
            self.assertLess(e_g, F32_GRAD_TOL, name)

    def test_detached_logprobs_agree_grads_differ_on_prompt_side(self):
        for n in (1, 2, 4):
            r = self.res[(n, "detached")]
            self.assertLess(rel(r["logprobs"], self.ref_lp), F64_TOL)
            # the head only sees response positions: its gradient is the same in both modes
            e_head, name = worst(r["grads"], self.ref_grad, ["norm.weight", "lm_head.weight"])
            self.assertLess(e_head, F64_TOL, name)
            for t in ("embed.weight", "layers.0.gdn.A_log", "layers.1.attn.k.weight"):
                self.assertGreater(rel(r["grads"][t], self.ref_grad[t]), BROKEN, f"CP-{n} {t}")
        # detached CP-N equals detached CP-1 (the mode is a different gradient, not a broken one)
        e, name = worst(self.res[(2, "detached")]["grads"], self.res[(1, "detached")]["grads"])
        self.assertLess(e, F64_TOL, name)

    def test_rollout_samples_alike_and_matches_reference(self):
        r1, r2 = self.res[(1, "rollout")], self.res[(2, "rollout")]
        self.assertEqual(r1["responses"], r2["responses"])
        self.assertEqual(len(r1["responses"]), 3)
        self.assertTrue(all(len(y) == 4 for y in r1["responses"]))
        b = {"prompt": self.batch["prompt"], "responses": r2["responses"], "rewards": r2["rewards"]}
        lp, g, _ = reference.compute(self.wpath, b)
        self.assertLess(rel(r2["logprobs"], lp), F64_TOL)
        self.assertLess(worst(r2["grads"], g)[0], F64_TOL)
        self.assertEqual(r2["rewards"], [train.reward_of(y) for y in r2["responses"]])

    # ---------------------------------------------------------------- faults
    def test_zero_state_moves_logprobs(self):
        r = self.res[(2, "zero-state")]
        e = rel(r["logprobs"], self.ref_lp)
        print(f"zero-state CP-2 logprob vs reference {e:.2e}")
        self.assertGreater(e, BROKEN)

    def test_skip_dkv_reduce_moves_cp_grad_not_logprobs(self):
        r, c1 = self.res[(2, "skip-dkv-reduce")], self.res[(1, "full")]
        self.assertLess(rel(r["logprobs"], self.ref_lp), F64_TOL)
        e, name = worst(r["grads"], c1["grads"])
        print(f"skip-dkv-reduce CP-2 grad vs CP-1 {e:.2e} ({name})")
        self.assertGreater(e, BROKEN)
        self.assertGreater(r["disagree"], 0)     # rank 0 and the owner continue differently
        # every tensor the response keys feed into is affected; the head is not
        self.assertLess(worst(r["grads"], c1["grads"], ["lm_head.weight", "norm.weight"])[0], F64_TOL)

    def test_loss_cp_scale_doubles_cp2_grad(self):
        r, c1 = self.res[(2, "loss-cp-scale")], self.res[(1, "full")]
        self.assertGreater(worst(r["grads"], c1["grads"])[0], BROKEN)
        doubled = {n: 2 * g for n, g in c1["grads"].items()}
        self.assertLess(worst(r["grads"], doubled)[0], F64_TOL)
        self.assertLess(rel(r["logprobs"], self.ref_lp), F64_TOL)

    def test_fake_reduce_moves_cp_grad_and_digests(self):
        r, c1 = self.res[(2, "fake-reduce")], self.res[(1, "full")]
        e, name = worst(r["grads"], c1["grads"])
        print(f"fake-reduce CP-2 grad vs CP-1 {e:.2e} ({name})")
        self.assertGreater(e, BROKEN)
        self.assertGreater(r["disagree"], 0)

    def test_decay_grad_moves_grad_only_on_decay_terms(self):
        r = self.res[(2, "decay-grad")]
        decay = [n for n in self.names if n.endswith(".A_log") or n.endswith(".dt_bias")]
        other = [n for n in self.names if n not in decay]
        self.assertGreater(worst(r["grads"], self.ref_grad, decay)[0], BROKEN)
        self.assertLess(worst(r["grads"], self.ref_grad, other)[0], F64_TOL)
        self.assertLess(rel(r["logprobs"], self.ref_lp), F64_TOL)
        self.assertEqual(r["disagree"], 0)        # every rank corrupts alike: CP-2 == CP-1 here

    def test_finite_differences_on_decay_terms(self):
        """The trainer's own loss (CP-1 forward) differentiated numerically along every A_log and
        dt_bias entry: the full gradient agrees, decay-grad's does not."""
        decay = [n for n in self.names if n.endswith(".A_log") or n.endswith(".dt_bias")]
        h = 1e-5
        jobs, where = [], []
        for n in decay:
            for i in range(self.W[n].numel()):
                for s in (1, -1):
                    W = {k: v.clone() for k, v in self.W.items()}
                    W[n].view(-1)[i] += s * h
                    jobs.append(job(self.batch, W, mode="loss"))
                where.append((n, i))
        with tempfile.TemporaryDirectory() as d:
            out = train.launch(1, jobs, d)
        good, bad = self.res[(1, "full")]["grads"], self.res[(2, "decay-grad")]["grads"]
        err_good = err_bad = 0.0
        scale = max(float(good[n].abs().max()) for n in decay)
        for k, (n, i) in enumerate(where):
            fd = (out[2 * k]["loss"] - out[2 * k + 1]["loss"]) / (2 * h)
            err_good = max(err_good, abs(fd - float(good[n].view(-1)[i])) / scale)
            err_bad = max(err_bad, abs(fd - float(bad[n].view(-1)[i])) / scale)
        print(f"finite differences on decay terms: full {err_good:.2e}, decay-grad {err_bad:.2e}")
        self.assertLess(err_good, 1e-6)
        self.assertGreater(err_bad, BROKEN)

    def test_faults_recorded_and_refused_unknown(self):
        with self.assertRaises(ValueError):
            train.cp_step.Step(self.W, None, None, faults=["no-such-fault"])


def read_trace(path):
    import zstandard
    with open(path, "rb") as f:
        lines = zstandard.ZstdDecompressor().stream_reader(f).read().decode().splitlines()
    return json.loads(lines[0]), [json.loads(x) for x in lines[1:]]


def profile_failures(run_dir, profile, grad_mode):
    """A small re-reading of the profile's step plan and collective rules against a run's traces
    (the audit's rank.layers and collectives.* in miniature), so the profile is tested here."""
    def holds(when):
        return all(w in (grad_mode, "longstraw", "not_sft", "not_prefix_frozen") for w in (when or []))
    fails = []
    ranks = sorted(x for x in os.listdir(run_dir) if x.startswith("rank-"))
    for rk in ranks:
        hdr, evs = read_trace(os.path.join(run_dir, rk, "events.jsonl.zst"))
        n_layers, phase, layer_ev, coll = 3, None, [], []
        for e in evs:
            if e["ev"] == "phase_begin":
                phase = e["phase"]
            elif e["ev"] == "phase_end":
                phase = None
            elif e["ev"] == "layer_end" and not e.get("recompute"):
                layer_ev.append(e)
            elif e["ev"] == "collective":
                coll.append(dict(e, phase=phase))
        members = sorted({e["member"] for e in layer_ev if e["member"] >= 0})
        for st_ in profile["steps"]:
            if st_["unit"] == "none" or not holds(st_.get("when")):
                continue
            layers = [L for name in st_["layers"] for L in
                      {"embed": [-1], "stack": list(range(n_layers)), "head": [n_layers]}[name]]
            for m in ([-1] if st_["unit"] == "prompt" else members):
                for L in layers:
                    for d in st_["dirs"]:
                        if not any(e["phase"] == st_["phase"] and e["member"] == m and e["layer"] == L
                                   and e["dir"] == d for e in layer_ev):
                            fails.append(f"{rk} rank.layers {st_['phase']} member {m} layer {L} {d}")
        if hdr["world"] == 1:
            continue
        for rule, spec in profile["collectives"].items():
            for ent in spec.get("layers", []):
                if not holds(ent.get("when")):
                    continue
                for L in range(n_layers):
                    for ph in ent["phases"]:
                        evs_l = [e for e in layer_ev if e["layer"] == L and e["phase"] == ph
                                 and e["kind"] in ent["layer_kinds"] and e["dir"] == ent["dir"]
                                 and (ent.get("unit") != "member" or e["member"] >= 0)
                                 and (ent.get("unit") != "prompt" or e["member"] == -1)]
                        if not evs_l:
                            continue
                        for pur in ent["purposes"]:
                            got = sum(1 for c in coll if c["phase"] == ph and c.get("layer") == L
                                      and c["purpose"] == pur)
                            need = len(evs_l) if ent["count"] == "per_event" else 1
                            if (got < need) if ent["count"] == "once" else (got != need):
                                fails.append(f"{rk} {rule} {ph} layer {L} {pur}: {got} of {need}")
            for ent in spec.get("steps", []):
                if holds(ent.get("when")):
                    for pur in ent["purposes"]:
                        if not any(c["phase"] == ent["phase"] and c["purpose"] == pur for c in coll):
                            fails.append(f"{rk} {rule} {ent['phase']} {pur}: missing")
    return fails


def collective_mismatches(run_dir):
    """Per (group, gseq), op/red/count/dtype/purpose/layer equal on every rank and every rank has
    the same number (the audit's collectives.match in miniature); point-to-point messages per
    channel: the k-th send's count, dtype, purpose, layer and in_digest equal the k-th receive's
    (collectives.p2p in miniature)."""
    seqs, sends, recvs = {}, {}, {}     # seqs: group -> {rank: its collectives in the group}
    for rk in sorted(x for x in os.listdir(run_dir) if x.startswith("rank-")):
        hdr, evs = read_trace(os.path.join(run_dir, rk, "events.jsonl.zst"))
        r = hdr["rank"]
        coll = [e for e in evs if e["ev"] == "collective"]
        for g in hdr["groups"]:
            seqs.setdefault(g["name"], {})[r] = [
                (e["gseq"], e["op"], e["red"], e["count"], e["dtype"], e["purpose"], e.get("layer"))
                for e in coll if e["group"] == g["name"] and e["op"] not in ("send", "recv")]
        for e in coll:
            if e["op"] == "send":
                sends.setdefault((e["group"], e["rank"], e["peer"], e.get("tag", 0)), []).append(e)
            elif e["op"] == "recv":
                recvs.setdefault((e["group"], e["peer"], e["rank"], e.get("tag", 0)), []).append(e)
    bad = []
    for g, per in sorted(seqs.items()):
        first = min(per)
        for r, q in sorted(per.items()):
            if len(q) != len(per[first]):
                bad.append(f"group {g} rank {r}: {len(q)} collectives, rank {first} {len(per[first])}")
            bad += [f"group {g} rank {r} {a} vs rank {first} {b}" for a, b in zip(q, per[first]) if a != b]
    for ch in sorted(set(sends) | set(recvs)):
        s, r = sends.get(ch, []), recvs.get(ch, [])
        if len(s) != len(r):
            bad.append(f"channel {ch}: {len(s)} sends, {len(r)} receives")
        for a, b in zip(s, r):
            key = ("gseq", "count", "dtype", "purpose", "layer")
            if [a.get(k) for k in key] != [b.get(k) for k in key] or a["in_digest"] != b["out_digest"] \
                    or "in_digest_done" in a:
                bad.append(f"channel {ch} gseq {a['gseq']}: send {a} vs receive {b}")
    return bad


class TorchCPFiles(unittest.TestCase):
    """adapter.json and profiles/torch-cp.json: schema-valid where the schemas are in the tree, and
    consistent with the trainer's fault flags and with each other."""

    def load(self, *parts):
        with open(os.path.join(ROOT, *parts)) as f:
            return json.load(f)

    def validate(self, doc, schema_file):
        path = os.path.join(ROOT, "schemas", schema_file)
        if not os.path.exists(path):
            return False
        import jsonschema
        with open(path) as f:
            jsonschema.validate(doc, json.load(f))
        return True

    def test_adapter_and_profile_agree_with_the_trainer(self):
        ad = self.load("examples", "torch_cp", "adapter.json")
        prof = self.load("profiles", "torch-cp.json")
        self.validate(ad, "parity-adapter.schema.json")
        self.validate(prof, "profile.schema.json")
        faults = set(train.cp_step.FAULTS) | set(train.cp_step.DP_FAULTS)
        self.assertEqual(set(ad["faults"]["controls"]), faults)
        self.assertEqual({f for f, c in ad["faults"]["controls"].items() if c == "dp_grad"},
                         set(train.cp_step.DP_FAULTS))
        self.assertEqual(ad["dp"], [1, 2])
        # the bugs the adapter does not declare (README.md) are flags the profile knows, never controls
        bugs = set(train.cp_step.BUGS)
        self.assertFalse(bugs & faults)
        self.assertEqual(set(prof["faults"]), faults | bugs | set(train.cp_step.TRACE_FAULTS))
        self.assertFalse(set(train.cp_step.TRACE_FAULTS) & set(ad["faults"]["controls"]))
        le_mod = train.evidence.import_emitter()
        if le_mod is not None:
            self.assertEqual(set(prof["paths"]), set(le_mod.PATHS))    # every decision the audit knows
        self.assertEqual(prof["probe"], "required")
        self.assertTrue(ad["batch"]["prompt_only"])
        self.assertEqual(dict(ad["faults"]["controls"], detached="grad"), prof["controls"])
        self.assertEqual(ad["profile"], prof["name"])
        self.assertEqual(prof["phases"], train.evidence.PHASES)
        self.assertEqual(prof["layer_kinds"], train.evidence.LAYER_KINDS)
        self.assertEqual(ad["batch"]["vocab"], M.CONFIG["vocab"])
        self.assertGreaterEqual(ad["batch"]["prompt_len"] - 1, max(ad["cp"]))
        obj = ad["objective"]
        self.assertEqual((obj["epsilon"], obj["beta"], obj["temperature"]), (0.2, 0.0, 1.0))
        args = " ".join(ad["args"])
        for flag in ("--epsilon 0.2", "--temperature 1.0", "--optimizer adamw", f"--lr {ad['optimizer']['lr']}"):
            self.assertIn(flag, args)


class TorchCPCli(unittest.TestCase):
    """The command line: init, run with a v2 run directory, reference, loss, usage errors."""

    def cli(self, *args, env=None):
        return subprocess.run([sys.executable, os.path.join(EX, "train.py")] + list(args),
                              capture_output=True, text=True, env=env, timeout=120)

    def usage(self, *args):
        """train.main in this process: the UsageError's message (the CLI prints it and exits 2)."""
        with self.assertRaises(train.UsageError) as cm:
            train.main(list(args))
        return str(cm.exception)

    def test_usage_errors_exit_2_naming_the_field(self):
        with tempfile.TemporaryDirectory() as d:
            r = self.cli("--mode", "run", "--weights", "x", "--out", d)      # the real exit status
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("--weights x", r.stderr)
            self.assertEqual(train.main(["--mode", "init", "--out", d]), 0)
            w = os.path.join(d, "weights.safetensors")
            with open(w, "rb") as f:
                blob = f.read()
            t = os.path.join(d, "t.safetensors")
            for cut, what in ((4, "truncated"), (len(blob) - 8, "data_offsets"), (40, "header length")):
                with open(t, "wb") as f:
                    f.write(blob[:cut])
                msg = self.usage("--mode", "run", "--weights", t, "--out", d)
                self.assertIn(t, msg)
                self.assertIn(what, msg)
            W = st.load(w)
            W["lm_head.weight"] = W["lm_head.weight"][:3]
            st.save(t, W)
            self.assertIn("lm_head.weight has shape", self.usage("--mode", "run", "--weights", t, "--out", d))
            short = os.path.join(d, "short.json")
            self.assertIn("short.json", self.usage("--mode", "run", "--weights", w, "--batch", short, "--out", d))
            for batch, field in (({"prompt": [1, 2, 3], "responses": [[1]], "rewards": [0]}, "fewer than --cp 4"),
                                 ({"prompt": [1, 2, 99], "responses": [[1]], "rewards": [0]}, "prompt"),
                                 ({"prompt": [1, 2, 3, 4, 5], "responses": [[1]], "rewards": []}, "rewards"),
                                 ({"prompt": [1, 2, 3, 4, 5], "responses": [[1], []], "rewards": [0, 1]},
                                  "responses[1]"),
                                 ({"prompt": [1, 2, 3, 4, 5], "responses": [[1]], "rewards": [0],
                                   "old_logprobs": [[0.0, 1.0]]}, "old_logprobs"),
                                 ({"prompt": [1, 2, 3, 4, 5], "responses": [[1]] * 65,
                                   "rewards": [0] * 65}, "1 to 64 responses"),
                                 ({"prompt": [1, 2, 3, 4, 5], "responses": [[1]], "rewards": [True]},
                                  "rewards"),
                                 ({"prompt": [1, 2, 3, 4, 5], "responses": [[1]], "rewards": [0],
                                   "advantages": ["x"]}, "advantages")):
                with open(short, "w") as f:
                    json.dump(batch, f)
                msg = self.usage("--mode", "run", "--cp", "4", "--weights", w, "--batch", short, "--out", d)
                self.assertIn(field, msg)
            with open(short, "w") as f:
                f.write('{"prompt": [1, 2, 3], "responses": [[1]], "rewards": [NaN]}')
            self.assertIn("NaN is not JSON", self.usage("--mode", "run", "--weights", w, "--batch", short, "--out", d))
            with open(short, "w") as f:
                f.write("[" * 100000)
            self.assertIn("short.json", self.usage("--mode", "run", "--weights", w, "--batch", short, "--out", d))
            self.assertIn("--fault bogus", self.usage("--mode", "run", "--fault", "bogus", "--out", d))
            self.assertIn("--cp 5", self.usage("--mode", "run", "--cp", "5", "--out", d))

    def test_mpirun_launch(self):
        import shutil
        if shutil.which("mpirun") is None:
            self.skipTest("no mpirun")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(self.cli("--mode", "init", "--seed", "5", "--out", d).returncode, 0)
            w, b = os.path.join(d, "weights.safetensors"), os.path.join(d, "batch.json")
            r = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", sys.executable,
                                os.path.join(EX, "train.py"), "--mode", "run", "--cp", "2", "--no-evidence",
                                "--weights", w, "--batch", b, "--out", d], capture_output=True, text=True,
                               env=env, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(b) as f:
                lp, g, loss = reference.compute(w, json.load(f))
            self.assertLess(worst(st.load(os.path.join(d, "grads.safetensors")), g)[0], F64_TOL)
            L = st.load(os.path.join(d, "logprobs.safetensors"))
            self.assertEqual(sorted(L), [f"member.{i}" for i in range(len(L))])
            self.assertLess(rel(torch.cat([L[f"member.{i}"] for i in range(len(L))]), lp), F64_TOL)

    def test_run_directory_and_modes(self):
        le_path = os.environ.get("PYTHONPATH", "")
        env = dict(os.environ)
        sys.path[:0] = [p for p in le_path.split(os.pathsep) if p]
        import evidence
        if evidence.import_emitter() is None:
            self.skipTest("longstraw_emit not importable (PYTHONPATH or python/)")
        import zstandard
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(self.cli("--mode", "init", "--seed", "4", "--out", d).returncode, 0)
            w, b = os.path.join(d, "weights.safetensors"), os.path.join(d, "batch.json")
            r = self.cli("--mode", "run", "--cp", "2", "--weights", w, "--batch", b,
                         "--out", os.path.join(d, "ok"), env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(b) as f:
                batch = json.load(f)
            W = train.load_weights(w)
            jobs = []          # the other runs in one launch (each still its own run directory)
            for name, kw in (("fake", {"faults": ["fake-reduce"]}), ("skipdkv", {"faults": ["skip-dkv-reduce"]}),
                             ("det", {"grad_mode": "detached"}), ("stale", {"faults": ["stale-handoff"]})):
                os.makedirs(os.path.join(d, name))
                jobs.append(job(batch, W, cp=2, out=os.path.join(d, name), run_id=f"run-test-{name}",
                                run_dir=os.path.join(d, name, "run"), probe_every=1, **kw))
            train.launch(2, jobs)
            os.makedirs(os.path.join(d, "cp4"))
            train.launch(4, [job(batch, W, cp=4, out=os.path.join(d, "cp4"), run_id="run-test-cp4",
                                 run_dir=os.path.join(d, "cp4", "run"))])
            for name in ("ok", "fake", "skipdkv", "det", "cp4"):
                self.assertEqual(collective_mismatches(os.path.join(d, name, "run")), [], name)
            # DDP around the CP model: 2 replicas of CP-2, their groups cp-dD and dp-cC, every group's sequence
            # alike on its members, the DDP bucket reductions in the dp groups with equal output digests
            os.makedirs(os.path.join(d, "dp"))
            train.launch(4, [job(batch, W, cp=2, dp=2, out=os.path.join(d, "dp"), run_id="run-test-dp",
                                 run_dir=os.path.join(d, "dp", "run"), probe_every=1)])
            self.assertEqual(collective_mismatches(os.path.join(d, "dp", "run")), [])
            hdr, evs = read_trace(os.path.join(d, "dp", "run", "rank-0003", "events.jsonl.zst"))
            self.assertEqual([(g["name"], g["kind"], g["members"]) for g in hdr["groups"]],
                             [("world", "world", [0, 1, 2, 3]), ("cp-d1", "cp", [2, 3]), ("dp-c1", "dp", [1, 3])])
            ddp = [e for e in evs if e["ev"] == "collective" and e["purpose"] == "grad_allreduce"]
            self.assertEqual(len(ddp), 2)      # one bucket reduction per replayed member (4 members, 2 replicas)
            self.assertTrue(all(e["group"] == "dp-c1" and e["out_digest"] for e in ddp))
            with open(os.path.join(d, "dp", "run", "manifest.json")) as f:
                self.assertEqual(json.load(f)["predicate"]["config"]["dp_ranks"], 2)
            # the stale hand-off: rank 0's two GDN hand-offs, each send's buffer changed before it completed
            stale = collective_mismatches(os.path.join(d, "stale", "run"))
            self.assertEqual(len(stale), 2, stale)
            self.assertTrue(all("in_digest_done" in x and "state_handoff" in x for x in stale), stale)
            ref = os.path.join(d, "ref")
            self.assertEqual(self.cli("--mode", "reference", "--weights", w, "--batch", b,
                                      "--out", ref).returncode, 0)
            ok = os.path.join(d, "ok")
            for f in ("logprobs.safetensors", "grads.safetensors", "params.safetensors", "loss.json",
                      "run/manifest.json", "run/rank-0000/receipt.json", "run/rank-0001/events.jsonl.zst"):
                self.assertTrue(os.path.exists(os.path.join(ok, f)), f)
            self.assertLess(worst(st.load(os.path.join(ok, "grads.safetensors")),
                                  st.load(os.path.join(ref, "grads.safetensors")))[0], F64_TOL)
            L, R = (st.load(os.path.join(x, "logprobs.safetensors")) for x in (ok, ref))
            self.assertEqual(sorted(L), sorted(R))
            self.assertEqual(len(L), len(batch["responses"]))
            self.assertLess(worst(L, R)[0], F64_TOL)

            def finalize_digests(run):
                digs = []
                for r in (0, 1):
                    p = os.path.join(d, run, "run", f"rank-{r:04d}", "events.jsonl.zst")
                    with open(p, "rb") as f:
                        lines = zstandard.ZstdDecompressor().stream_reader(f).read().decode().splitlines()
                    hdr = json.loads(lines[0])
                    self.assertEqual(hdr["profile"], "torch-cp")
                    ev = [json.loads(x) for x in lines[1:]]
                    digs.append([e.get("out_digest") for e in ev if e.get("purpose") == "grad_finalize"])
                return digs
            a, bb = finalize_digests("ok")
            self.assertEqual(a, bb)
            self.assertEqual(len(a), 1)
            a, bb = finalize_digests("fake")
            self.assertNotEqual(a, bb)     # logged, never performed: the ranks' buffers differ
            with open(os.path.join(d, "fake", "run", "rank-0000", "receipt.json")) as f:
                rc = json.load(f)
            self.assertEqual(rc["predicate"]["config"]["faults"], ["fake-reduce"])
            # the run's path: the init batch gives responses and old log-probs, 12 positions split evenly
            with open(os.path.join(ok, "run", "manifest.json")) as f:
                paths = json.load(f)["predicate"]["config"]["paths"]
            self.assertEqual(paths, {"old_logprobs": ["given"], "responses": ["given"], "shards": ["even"],
                                     "reference": ["none"], "prompt_groups": ["one"], "prefix": ["fresh"],
                                     "start": ["fresh"], "pages": ["aligned"], "chunks": ["aligned"],
                                     "task": ["none"], "replay": ["taped"],
                                     "state_tier": ["device"]})

            def probes(run):
                out = []
                for r in (0, 1):
                    p = os.path.join(d, run, "run", f"rank-{r:04d}", "events.jsonl.zst")
                    with open(p, "rb") as f:
                        lines = zstandard.ZstdDecompressor().stream_reader(f).read().decode().splitlines()
                    out.append([json.loads(x) for x in lines[1:] if '"ev":"gradient_probe"' in x])
                return out
            for run, verdict in (("ok", "pass"), ("fake", "fail"), ("skipdkv", "fail"), ("det", "reported")):
                p0, p1 = probes(run)
                self.assertEqual(len(p0), 1, run)
                self.assertEqual((p0[0]["verdict"], p1[0]["verdict"]), (verdict, verdict), run)
                self.assertEqual([g["verdict"] for g in p0[0]["groups"]], [g["verdict"] for g in p1[0]["groups"]])
                self.assertEqual(p0[0]["grouping"], "layer")
                self.assertEqual(p0[0]["evaluations"], 4 * len(p0[0]["groups"]))
            self.assertFalse(probes("fake")[0][0]["ranks_agree"])     # rank 0's gradient is not rank 1's
            # the profile: schema-valid (when the schema is in the tree) and what the runs show
            with open(os.path.join(ROOT, "profiles", "torch-cp.json")) as f:
                prof = json.load(f)
            schema = os.path.join(ROOT, "schemas", "profile.schema.json")
            if os.path.exists(schema):
                import jsonschema
                with open(schema) as f:
                    jsonschema.validate(prof, json.load(f))
            self.assertEqual(profile_failures(os.path.join(ok, "run"), prof, "full"), [])
            self.assertEqual(profile_failures(os.path.join(d, "cp4", "run"), prof, "full"), [])
            self.assertEqual(profile_failures(os.path.join(d, "det", "run"), prof, "detached"), [])
            self.assertEqual(profile_failures(os.path.join(d, "fake", "run"), prof, "full"), [])
            fails = profile_failures(os.path.join(d, "skipdkv", "run"), prof, "full")
            self.assertTrue(fails and all("collectives.dkv" in x and "dkv_sum" in x for x in fails), fails)
            # a detached run checked as if full lacks the prompt backward and the finalize reduction
            fails = profile_failures(os.path.join(d, "det", "run"), prof, "full")
            self.assertTrue(any("prompt_bwd" in x for x in fails) and any("grad_finalize" in x for x in fails))
            # loss mode: the base weights' loss equals the run's
            lst = os.path.join(d, "list.txt")
            with open(lst, "w") as f:
                f.write(w + "\n")
            r = self.cli("--mode", "loss", "--weights", lst, "--batch", b, "--out", os.path.join(d, "l"))
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(d, "l", "losses.json")) as f:
                got = json.load(f)["losses"]
            self.assertEqual(len(got), 1)
            got = got[0]
            with open(os.path.join(ok, "loss.json")) as f:
                want = json.load(f)["loss"]
            self.assertLess(abs(got - want), 1e-12 * max(abs(want), 1))


if __name__ == "__main__":
    unittest.main(verbosity=2)
