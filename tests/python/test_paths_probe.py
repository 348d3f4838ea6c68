"""The run's path (config "paths": RunWriter(config={"paths": ...}), w.path) and the gradient probe
(le.gradient_probe, w.gradient_probe): what is written, what is refused, the probe's judgement on a
loss known in closed form, the parameters restored bit for bit, two ranks agreeing (gloo)."""

import json
import os
import tempfile
import unittest

import common
import tracefile

import longstraw_emit as le

try:
    import torch
except ImportError:  # the path tests need no torch
    torch = None


def _load(path):
    with open(path) as f:
        return json.load(f)


def _schema(name):
    p = os.path.join(os.path.dirname(__file__), "..", "..", "schemas", name)
    return _load(p) if os.path.exists(p) else None


class Paths(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def profile(self, paths):
        p = os.path.join(self.d, "prof.json")
        with open(p, "w") as f:
            json.dump({"schema": "urn:longstraw:schema:profile:v1", "name": "torch-cp", "paths": paths}, f)
        return p

    def test_accumulated_sorted_in_receipt_and_manifest(self):
        w = common.writer(self.d, config=common.config(paths={"responses": "sampled"}))
        w.path("shards", "uneven")
        w.path("responses", "given")
        w.path("responses", "sampled")          # a set: repeats are one value
        w.path("task", "recall")
        self.assertEqual(w.paths, {"responses": ["given", "sampled"], "shards": ["uneven"], "task": ["recall"]})
        w.close()
        le.write_manifest(os.path.join(self.d, "run"))
        rc = _load(os.path.join(self.d, "run", "rank-0000", "receipt.json"))["predicate"]["config"]
        mf = _load(os.path.join(self.d, "run", "manifest.json"))["predicate"]["config"]
        want = {"responses": ["given", "sampled"], "shards": ["uneven"], "task": ["recall"]}
        self.assertEqual(rc["paths"], want)
        self.assertEqual(mf["paths"], want)
        for doc, schema in ((_load(os.path.join(self.d, "run", "rank-0000", "receipt.json")), "receipt-v2.schema.json"),
                            (_load(os.path.join(self.d, "run", "manifest.json")), "manifest-v2.schema.json")):
            s = _schema(schema)
            if s is not None:
                import jsonschema
                jsonschema.validate(doc, s)

    def test_a_value_the_audit_does_not_know_is_written_as_given(self):
        w = common.writer(self.d)
        w.path("responses", "maybe")                # the audit refuses to cover it; the writer does not lie
        w.close()
        rc = _load(os.path.join(self.d, "run", "rank-0000", "receipt.json"))["predicate"]["config"]
        self.assertEqual(rc["paths"], {"responses": ["maybe"]})
        self.assertNotIn("maybe", le.PATHS["responses"])

    def test_no_path_no_key(self):
        w = common.writer(self.d)
        w.close()
        self.assertNotIn("paths", _load(os.path.join(self.d, "run", "rank-0000", "receipt.json"))["predicate"]["config"])

    def test_refused_naming_the_field(self):
        w = common.writer(self.d)
        for key, value, what in (("Shards", "even", "paths key"), ("shards", "Even", "paths.shards"),
                                 ("task", "", "paths.task"), ("task", "a b", "paths.task")):
            with self.assertRaises(ValueError) as cm:
                w.path(key, value)
            self.assertIn(what, str(cm.exception))
        with self.assertRaises(ValueError):
            w.path("shards")
        self.assertEqual(w.paths, {})
        for bad in ({"responses": []}, {"responses": ["Often"]}, ["responses"]):
            with self.assertRaises(ValueError):
                common.writer(self.d, run=f"r{len(str(bad))}", config=common.config(paths=bad))

    def test_profile_names_the_decisions(self):
        prof = self.profile(["responses", "shards"])
        w = le.RunWriter(os.path.join(self.d, "p"), 0, 1, "run-p", "torch-cp", prof, tool="t",
                         groups=[le.Group("world", "world", [0])], phases=common.PHASES,
                         layer_kinds=common.LAYER_KINDS, config=common.config(), artifacts=common.ARTIFACTS)
        with self.assertRaises(ValueError) as cm:
            w.path("pages", "cut")                      # not a decision of this profile's trainer
        self.assertIn("pages", str(cm.exception))
        w.path("responses", "sampled")
        with self.assertRaises(ValueError) as cm:       # shards never recorded: a complete run says all
            w.close()
        self.assertIn("shards", str(cm.exception))
        w.path("shards", "one")
        w.close()

    def test_ranks_must_agree(self):
        for rank, v in ((0, "even"), (1, "uneven")):
            w = common.writer(self.d, rank=rank, world=2)
            w.path("shards", v)
            w.close()
        with self.assertRaises(le.ManifestError) as cm:
            le.write_manifest(os.path.join(self.d, "run"))
        self.assertIn("config", str(cm.exception))


@unittest.skipIf(torch is None, "torch not importable")
class Probe(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        g = torch.Generator().manual_seed(0)
        self.P = {"embed.weight": torch.randn(3, 4, generator=g, dtype=torch.float64),
                  "layers.0.w": torch.randn(5, generator=g, dtype=torch.float64),
                  "layers.1.w": torch.randn(2, 2, generator=g, dtype=torch.float64)}

    def tearDown(self):
        self.tmp.cleanup()

    def loss(self, P=None):
        P = P or self.P
        return P["embed.weight"].sin().sum() * P["layers.0.w"].pow(2).sum() + P["layers.1.w"].exp().sum()

    def grads(self):
        Q = {n: t.clone().requires_grad_(True) for n, t in self.P.items()}
        self.loss(Q).backward()
        return {n: t.grad for n, t in Q.items()}

    def events(self, w):
        w.close()
        return [e for e in tracefile.read(os.path.join(self.d, "run", "rank-0000", "events.jsonl.zst"))[1]
                if e["ev"] == "gradient_probe"]

    def test_pass_fail_and_restored(self):
        before = {n: t.clone() for n, t in self.P.items()}
        g = self.grads()
        w = common.writer(self.d)
        r = le.gradient_probe(w, 3, self.loss, self.P, g, seed=7, groups="layer")
        self.assertEqual(r["verdict"], "pass")
        self.assertEqual([x["name"] for x in r["groups"]], ["other", "layers.0", "layers.1"])
        self.assertEqual(r["evaluations"], 12)
        for x in r["groups"]:
            self.assertLess(x["rel_error"], 1e-9)
        for n in self.P:
            self.assertTrue(torch.equal(before[n], self.P[n]), n)    # bit for bit
        bad = dict(g, **{"layers.0.w": g["layers.0.w"] * (1 + 1e-4)})
        r = le.gradient_probe(w, 4, self.loss, self.P, bad, seed=7, groups="layer")
        self.assertEqual(r["verdict"], "fail")
        self.assertEqual([x["verdict"] for x in r["groups"]], ["pass", "fail", "pass"])
        self.assertIn("layers.0", r["reason"])
        r = le.gradient_probe(w, 5, self.loss, self.P, bad, grad_mode="detached", seed=7)
        self.assertEqual((r["verdict"], r["grouping"], r["evaluations"]), ("reported", "all", 4))
        r = le.gradient_probe(w, 6, self.loss, self.P, g, not_applicable="a prefix-frozen step")
        self.assertEqual((r["verdict"], r["evaluations"], r["groups"]), ("not_applicable", 0, []))
        ev = self.events(w)
        self.assertEqual([e["verdict"] for e in ev], ["pass", "fail", "reported", "not_applicable"])
        keys = ["v", "rank", "seq", "ts_ns", "ev", "step", "objective", "grad_mode", "grouping", "h", "seed",
                "evaluations", "seconds", "tol", "verdict", "ranks_agree", "groups"]
        self.assertEqual(list(ev[0]), keys)
        self.assertEqual(list(ev[1]), keys[:15] + ["reason"] + keys[15:])
        self.assertEqual(list(ev[0]["groups"][0]), ["name", "tensors", "derivative", "applied", "error_estimate",
                                                    "rounding_floor", "rel_error", "tolerance", "h",
                                                    "decided_alike", "verdict"])
        self.assertEqual(ev[0]["groups"][0]["tensors"], 1)
        s = _schema("event-v2.schema.json")
        if s is not None:
            import jsonschema
            for e in ev:
                jsonschema.validate(e, s)

    def test_zero_derivative_judged_by_the_budget(self):
        P = {"a": torch.zeros(3, dtype=torch.float64)}
        g = {"a": torch.zeros(3, dtype=torch.float64)}
        r = le.gradient_probe(None, 0, lambda: float((P["a"] ** 2).sum()), P, g)
        self.assertEqual(r["verdict"], "pass")
        r = le.gradient_probe(None, 0, lambda: float((P["a"] ** 2).sum()), P, {"a": torch.ones(3, dtype=torch.float64)})
        self.assertEqual(r["verdict"], "fail")
        self.assertTrue(0 < r["groups"][0]["rel_error"] <= 1.7976931348623157e308)

    def test_unresolved_group_not_judged(self):
        """A loss whose rounding scale dwarfs its derivative (budget above a tenth of |D|): not judged."""
        P = {"a": torch.zeros(3, dtype=torch.float64)}
        g = {"a": torch.full((3,), 5.0, dtype=torch.float64)}      # wrong, but the differences cannot tell
        w = common.writer(self.d)
        r = le.gradient_probe(w, 0, lambda: ((P["a"]).sum(), 1e10), P, g)
        self.assertEqual(r["verdict"], "not_applicable")
        self.assertEqual(r["groups"][0]["verdict"], "not_applicable")
        self.assertIn("cannot resolve", r["reason"])
        ev = self.events(w)
        s = _schema("event-v2.schema.json")
        if s is not None:
            import jsonschema
            jsonschema.validate(ev[0], s)

    def test_refused(self):
        g = self.grads()
        with self.assertRaises(ValueError):
            le.gradient_probe(None, 0, self.loss, self.P, {"embed.weight": g["embed.weight"]})
        with self.assertRaises(ValueError):
            le.gradient_probe(None, 0, self.loss, self.P, dict(g, **{"layers.0.w": g["layers.1.w"]}))
        with self.assertRaises(ValueError):
            le.gradient_probe(None, 0, self.loss, self.P, g, grad_mode="partial")
        with self.assertRaises(ValueError):
            le.gradient_probe(None, 0, self.loss, self.P, g, groups="tensor")


if __name__ == "__main__":
    unittest.main()
