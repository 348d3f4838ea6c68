"""Collective wrappers in a 2-process torch.distributed (gloo, CPU) run: matching
gseq and equal out_sha256 on every rank for performed collectives, differing
digests for a note()-logged reduction that was never performed."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import tracefile

import longstraw_emit as le

try:
    import torch
    import torch.distributed as dist
    HAVE_GLOO = dist.is_available() and dist.is_gloo_available()
except ImportError:  # pragma: no cover
    torch = None
    HAVE_GLOO = False

HERE = os.path.dirname(os.path.abspath(__file__))


@unittest.skipIf(not HAVE_GLOO, "torch.distributed with gloo not available")
class TwoRanks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.outs = _spawn("dist_worker.py", cls.tmp.name)
        cls.run_dir = os.path.join(cls.tmp.name, "run")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        for rc, out in self.outs:
            self.assertEqual(rc, 0, out)
        self.traces = [tracefile.read(os.path.join(self.run_dir, f"rank-{r:04d}", "events.jsonl.zst")) for r in range(2)]

    def _coll(self, r, group):
        return [e for e in self.traces[r][1] if e["ev"] == "collective" and e["group"] == group]

    def test_gseq_and_ops_match_across_ranks(self):
        c0, c1 = self._coll(0, "cp"), self._coll(1, "cp")
        g0 = [e for e in c0 if e["op"] not in ("send", "recv")]
        g1 = [e for e in c1 if e["op"] not in ("send", "recv")]
        self.assertEqual([e["gseq"] for e in g0], list(range(7)))
        strip = lambda e: {k: v for k, v in e.items() if k not in ("rank", "seq", "ts_ns", "out_digest", "bytes")}
        self.assertEqual([e["op"] for e in g0],
                         ["allreduce", "allreduce", "allreduce", "broadcast", "allgather", "allreduce", "allreduce"])
        for a, b in zip(g0, g1):
            self.assertEqual(strip(a), strip(b))
        # a send on rank 0 and its recv on rank 1: a point-to-point channel of their own, gseq 0 on both
        s0 = [e for e in c0 if e["op"] == "send"]
        r1 = [e for e in c1 if e["op"] == "recv"]
        self.assertEqual([(e["gseq"], e["peer"]) for e in s0], [(0, 1)])
        self.assertEqual([(e["gseq"], e["peer"]) for e in r1], [(0, 0)])
        self.assertEqual(s0[0]["in_digest"], r1[0]["out_digest"])
        w0 = self._coll(0, "world")
        self.assertEqual([(e["gseq"], e["op"], e["red"], e["count"]) for e in w0], [(0, "barrier", "none", 0)])

    def test_fields(self):
        c0 = self._coll(0, "cp")
        self.assertEqual((c0[0]["red"], c0[0]["count"], c0[0]["dtype"], c0[0]["bytes"], c0[0]["purpose"],
                          c0[0]["layer"], c0[0]["step"]), ("sum", 4, "f64", 32, "dkv_sum", 1, 0))
        self.assertEqual((c0[1]["red"], c0[1]["dtype"], c0[1]["bytes"]), ("max", "f32", 8))
        self.assertEqual(c0[2]["red"], "avg")
        self.assertEqual((c0[3]["red"], c0[3]["dtype"], c0[3]["count"]), ("none", "i64", 1))
        # bytes: what this rank hands to others (trainer/dist/comm.c): the broadcast's root only,
        # the sender of a send/recv pair
        c1 = self._coll(1, "cp")
        self.assertEqual((c0[3]["bytes"], c1[3]["bytes"]), (0, 8))
        self.assertEqual((c0[5]["op"], c0[5]["bytes"], c1[5]["op"], c1[5]["bytes"]), ("send", 20, "recv", 0))
        self.assertEqual([a["bytes"] == b["bytes"] for a, b in zip(c0, c1)], [True] * 3 + [False, True, False] + [True] * 2)
        self.assertEqual((c0[4]["dtype"], c0[4]["count"], c0[4]["bytes"]), ("f16", 2, 4))
        self.assertNotIn("out_digest", c0[5])  # send: its input is what it hands off
        self.assertIn("in_digest", c0[5])
        # note(): the trainer's word, and the event says so
        self.assertEqual([e.get("declared", False) for e in c0], [False] * 6 + [True, True])

    def test_performed_collectives_have_equal_digests(self):
        c0, c1 = self._coll(0, "cp"), self._coll(1, "cp")
        alg = le.default_digest_alg()
        for i in (0, 1, 2, 3, 4, 7):
            with self.subTest(index=i):
                self.assertRegex(c0[i]["out_digest"], "^" + alg + ":[0-9a-f]+$")
                self.assertEqual(c0[i]["out_digest"], c1[i]["out_digest"])
        summed = torch.arange(4, dtype=torch.float64) * 3
        self.assertEqual(c0[0]["out_digest"], le.buffer_digest(summed, alg))

    def test_fake_reduction_digests_differ(self):
        c0, c1 = self._coll(0, "cp"), self._coll(1, "cp")
        self.assertEqual((c0[6]["op"], c0[6]["purpose"]), ("allreduce", "dkv_sum"))
        self.assertNotEqual(c0[6]["out_digest"], c1[6]["out_digest"])
        self.assertEqual(c0[6]["out_digest"], le.buffer_digest(torch.arange(4, dtype=torch.float64),
                                                               le.default_digest_alg()))

    def test_manifest_covers_both_ranks(self):
        with open(os.path.join(self.run_dir, "manifest.json")) as f:
            m = json.load(f)
        p = m["predicate"]
        self.assertEqual(p["ranks"], [{"rank": 0, "receipt": "rank-0000/receipt.json", "status": "complete"},
                                      {"rank": 1, "receipt": "rank-0001/receipt.json", "status": "complete"}])
        names = [s["name"] for s in m["subject"]]
        self.assertEqual(names, ["rank-0000/events.jsonl.zst", "rank-0000/receipt.json",
                                 "rank-0001/events.jsonl.zst", "rank-0001/receipt.json"])
        self.assertEqual(p["files"], 4)
        self.assertEqual(p["world"], 2)


def _spawn(script, tmp, extra=()):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, script), tmp, str(r), "2", *extra],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(2)]
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append((p.returncode, out.decode(errors="replace")))
    return outs


@unittest.skipIf(not HAVE_GLOO, "torch.distributed with gloo not available")
class DdpHook(unittest.TestCase):
    """DDP's bucket reductions, invisible by themselves, appear through
    Collectives.ddp_comm_hook, and the gradients are DDP's own."""

    def test_ddp_reductions_traced(self):
        with tempfile.TemporaryDirectory() as tmp:
            for hook in ("0", "1"):
                for rc, out in _spawn("ddp_worker.py", tmp, (hook,)):
                    self.assertEqual(rc, 0, out)
            grads = {}
            for run in ("ddp_plain", "ddp_hook"):
                for r in range(2):
                    with open(os.path.join(tmp, f"{run}-grads-{r}.json")) as f:
                        grads[run, r] = json.load(f)
            traces = {(run, r): tracefile.read(os.path.join(tmp, run, f"rank-{r:04d}", "events.jsonl.zst"))[1]
                      for run in ("ddp_plain", "ddp_hook") for r in range(2)}
        # the same gradients as DDP's own reducer, equal on both ranks
        for name, g in grads["ddp_plain", 0].items():
            for key in (("ddp_plain", 1), ("ddp_hook", 0), ("ddp_hook", 1)):
                for a, b in zip(g, grads[key][name]):
                    self.assertAlmostEqual(a, b, places=12)
        # without the hook, DDP's reductions leave no event
        self.assertEqual([e for e in traces["ddp_plain", 0] if e["ev"] == "collective"], [])
        c0 = [e for e in traces["ddp_hook", 0] if e["ev"] == "collective"]
        c1 = [e for e in traces["ddp_hook", 1] if e["ev"] == "collective"]
        self.assertGreaterEqual(len(c0), 1)
        self.assertEqual([e["gseq"] for e in c0], list(range(len(c0))))
        self.assertEqual(sum(e["count"] for e in c0), 6 * 5 + 5 + 5 * 3 + 3)
        for a, b in zip(c0, c1):
            self.assertEqual((a["op"], a["red"], a["purpose"], a["count"], a["step"]),
                             ("allreduce", "avg", "grad_allreduce", b["count"], 0))
            self.assertEqual(a["out_digest"], b["out_digest"])


class _StubDist:
    """torch.distributed stand-in for the ops gloo lacks: records the calls,
    each rank's result computed as a 2-rank group would (the other rank's
    input being equal to this one's)."""

    class ReduceOp:
        SUM, MAX, MIN, PRODUCT, AVG = "SUM", "MAX", "MIN", "PRODUCT", "AVG"

    def __init__(self, backend):
        self.backend = backend
        self.calls = []

    def get_backend(self, group=None):
        return self.backend

    def get_world_size(self, group=None):
        return 2

    def all_reduce(self, t, op=None, group=None):
        self.calls.append(("all_reduce", op))
        if op in ("SUM",):
            t.mul_(2)

    def reduce_scatter(self, out, in_list, op=None, group=None):
        self.calls.append(("reduce_scatter", op))
        out.copy_(in_list[0] * 2)

    def all_to_all(self, out_list, in_list, group=None):
        self.calls.append(("all_to_all", None))
        for o, i in zip(out_list, in_list):
            o.copy_(i)


@unittest.skipIf(torch is None, "torch not installed")
class StubbedOps(unittest.TestCase):
    def test_reduce_scatter_all_to_all_avg(self):
        import common

        with tempfile.TemporaryDirectory() as d:
            w = common.writer(d, world=2)
            for backend in ("gloo", "nccl"):
                c = le.Collectives(w, "cp")
                c.dist = _StubDist(backend)
                a = torch.full((4,), 3.0, dtype=torch.float64)
                c.all_reduce(a, op="avg", purpose="grad_finalize", step=0)
                if backend == "gloo":
                    self.assertEqual(c.dist.calls, [("all_reduce", "SUM")])
                    self.assertEqual(a.tolist(), [3.0] * 4)  # (3+3)/2
                else:
                    self.assertEqual(c.dist.calls, [("all_reduce", "AVG")])
            out = torch.zeros(3, dtype=torch.float32)
            c.reduce_scatter(out, [torch.ones(3), torch.ones(3)], op="sum", purpose="grad_shard", layer=2)
            ins = [torch.ones(2, dtype=torch.int32), torch.ones(5, dtype=torch.int32)]
            c.all_to_all([torch.zeros(2, dtype=torch.int32), torch.zeros(5, dtype=torch.int32)], ins, purpose="route")
            c.note("allgather", "none", torch.ones(2), purpose="kv_gather",
                   performed_output=[torch.ones(2), torch.zeros(2)])
            self.assertRaises(ValueError, c.all_reduce, a, op="mean", purpose="x")
            self.assertRaises(ValueError, c.reduce_scatter, out, [out, out], op="avg", purpose="x")
            w.close()
            _h, ev, _t = tracefile.read(os.path.join(d, "run", "rank-0000", "events.jsonl.zst"))
        coll = [e for e in ev if e["ev"] == "collective"]
        self.assertEqual([e["gseq"] for e in coll], [0, 1, 2, 3, 4])
        self.assertEqual([(e["op"], e["red"]) for e in coll],
                         [("allreduce", "avg"), ("allreduce", "avg"), ("reduce_scatter", "sum"),
                          ("all_to_all", "none"), ("allgather", "none")])
        self.assertEqual((coll[2]["count"], coll[2]["dtype"], coll[2]["bytes"], coll[2]["layer"]), (3, "f32", 24, 2))
        self.assertNotIn("out_digest", coll[2])
        self.assertEqual((coll[3]["count"], coll[3]["dtype"], coll[3]["bytes"]), (7, "i32", 28))
        self.assertNotIn("out_digest", coll[3])
        self.assertEqual(coll[4]["out_digest"], le.buffer_digest(torch.tensor([1.0, 1.0, 0.0, 0.0]),
                                                                 le.default_digest_alg()))

    def test_group_of_one_sends_nothing(self):
        import common

        with tempfile.TemporaryDirectory() as d:
            w = common.writer(d, world=1)
            c = le.Collectives(w, "cp")
            c.dist = _StubDist("gloo")
            c.all_reduce(torch.ones(4, dtype=torch.float64), purpose="loss_sum")
            w.close()
            _h, ev, _t = tracefile.read(os.path.join(d, "run", "rank-0000", "events.jsonl.zst"))
        coll = [e for e in ev if e["ev"] == "collective"]
        self.assertEqual((coll[0]["count"], coll[0]["bytes"]), (4, 0))


if __name__ == "__main__":
    unittest.main()
