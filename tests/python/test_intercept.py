"""le.instrument: a 2-process gloo run whose trainer calls torch.distributed directly
(intercept_worker.py) has every call in its trace: group collectives aligned by gseq with
equal out_digest on both ranks, async calls written in issue order whatever the order of
their waits, point-to-point messages on their own channels with the sender's in_digest equal
to the receiver's out_digest, DDP's bucket reductions with DDP's own gradients, a changed
send buffer recorded (in_digest_done), a paused call absent, an unnamed process group refused."""

import json
import os
import unittest

import tracefile
from test_collectives import HAVE_GLOO, _spawn

import longstraw_emit as le

try:
    import xxhash  # noqa: F401
    ALG = "xxh3_128"
except ImportError:  # pragma: no cover
    ALG = "sha256"


def _strip(e):
    return {k: v for k, v in e.items() if k not in ("rank", "seq", "ts_ns", "bytes")}


@unittest.skipIf(not HAVE_GLOO, "torch.distributed with gloo not available")
class Intercepted(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import tempfile

        cls.tmp = tempfile.TemporaryDirectory()
        cls.outs = {m: _spawn("intercept_worker.py", cls.tmp.name, (m,)) for m in ("all", "stale", "unmapped")}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def trace(self, mode, r):
        for rc, out in self.outs[mode]:
            self.assertEqual(rc, 0, out)
        return tracefile.read(os.path.join(self.tmp.name, "run-" + mode, f"rank-{r:04d}", "events.jsonl.zst"))[1]

    def result(self, mode, r):
        with open(os.path.join(self.tmp.name, f"{mode}-result-{r}.json")) as f:
            return json.load(f)

    def coll(self, mode, r, p2p=False):
        return [e for e in self.trace(mode, r) if e["ev"] == "collective" and (e["op"] in ("send", "recv")) == p2p]

    def test_group_collectives_align(self):
        c0, c1 = self.coll("all", 0), self.coll("all", 1)
        self.assertEqual([e["gseq"] for e in c0], list(range(11)))
        self.assertEqual([e["op"] for e in c0], ["allreduce"] * 2 + ["broadcast", "allgather", "allgather"] +
                         ["allreduce"] * 3 + ["barrier", "allreduce", "allreduce"])
        for a, b in zip(c0, c1):
            self.assertEqual(_strip(a), _strip(b))
        # the context's purpose and layer; else the function's name; the step from the open phase
        self.assertEqual((c0[0]["purpose"], c0[0]["layer"], c0[0]["step"]), ("dkv_sum", 1, 0))
        self.assertEqual((c0[1]["purpose"], c0[1]["red"]), ("all_reduce", "max"))
        self.assertNotIn("layer", c0[1])
        # the output digests: this algorithm, every member's alike, of the real result
        for e in c0:
            if e["op"] != "barrier":
                self.assertTrue(e["out_digest"].startswith(ALG + ":"), e)
        import torch

        self.assertEqual(c0[0]["out_digest"], le.buffer_digest(torch.arange(4, dtype=torch.float64) * 3, ALG))
        # bytes: what this rank hands to others (the broadcast's root is rank 1)
        self.assertEqual((c0[2]["bytes"], self.coll("all", 1)[2]["bytes"]), (0, 8))
        # the paused call is absent; the call gloo refused (all_gather_into_tensor) left no event and no gap

    def test_async_in_issue_order(self):
        c0 = self.coll("all", 0)
        # 5 and 6 were waited in reverse order, 7 through its future, 9 never: still 5, 6, 7, 9 in order
        self.assertEqual([(e["gseq"], e["count"], e["dtype"]) for e in c0[5:8]],
                         [(5, 3, "f32"), (6, 2, "f64"), (7, 2, "f32")])
        seqs = [e["seq"] for e in c0]
        self.assertEqual(seqs, sorted(seqs))
        # the call nobody waited on is settled at the next phase boundary, inside a phase
        ev = self.trace("all", 0)
        i9 = next(i for i, e in enumerate(ev) if e["ev"] == "collective" and e.get("gseq") == 9 and e["op"] == "allreduce")
        opened = [e for e in ev[:i9] if e["ev"] in ("phase_begin", "phase_end")]
        self.assertEqual(opened[-1]["ev"], "phase_begin")

    def test_point_to_point_channels(self):
        p0, p1 = self.coll("all", 0, p2p=True), self.coll("all", 1, p2p=True)
        sends0 = [e for e in p0 if e["op"] == "send"]
        recvs1 = [e for e in p1 if e["op"] == "recv"]
        # rank 0 -> 1: tag 0 carries the blocking send (0) and the batch's isend (1); tag 7 its own channel
        self.assertEqual([(e["gseq"], e.get("tag", 0), e["peer"]) for e in sends0], [(0, 0, 1), (0, 7, 1), (1, 0, 1)])
        self.assertEqual([(e["gseq"], e.get("tag", 0), e["peer"]) for e in recvs1], [(0, 0, 0), (0, 7, 0), (1, 0, 0)])
        for s, r in zip(sends0, recvs1):
            self.assertEqual(s["in_digest"], r["out_digest"])
            self.assertEqual((s["count"], s["dtype"], s["purpose"], s["layer"]), (r["count"], r["dtype"], r["purpose"],
                                                                                  r["layer"]))
            self.assertNotIn("in_digest_done", s)
            self.assertEqual((s["bytes"] > 0, r["bytes"]), (True, 0))
        # the batch: rank 1 -> 0 on its own channel
        self.assertEqual([(e["op"], e["gseq"], e["peer"], e["purpose"]) for e in p1 if e["op"] == "send"],
                         [("send", 0, 0, "ring_kv")])
        self.assertEqual([e["in_digest"] for e in p1 if e["op"] == "send"],
                         [e["out_digest"] for e in p0 if e["op"] == "recv"])

    def test_ddp_reductions(self):
        c0, c1 = self.coll("all", 0), self.coll("all", 1)
        self.assertEqual((c0[10]["purpose"], c0[10]["count"]), ("grad_allreduce", 53))
        self.assertEqual(c0[10]["out_digest"], c1[10]["out_digest"])
        for r in (0, 1):
            got, want = self.result("all", r)["grads"], self.result("all", r)["expected"]
            for n in want:
                for a, b in zip(got[n], want[n]):
                    self.assertAlmostEqual(a, b, places=12)

    def test_changed_send_buffer(self):
        s = self.coll("stale", 0, p2p=True)[0]
        r = self.coll("stale", 1, p2p=True)[0]
        self.assertIn("in_digest_done", s)
        self.assertNotEqual(s["in_digest"], s["in_digest_done"])
        import torch

        self.assertEqual(s["in_digest"], le.buffer_digest(torch.ones(4), ALG))
        self.assertEqual(s["in_digest_done"], le.buffer_digest(torch.full((4,), 0.5), ALG))
        self.assertIn(r["out_digest"], (s["in_digest"], s["in_digest_done"]))

    def test_unnamed_group_refused(self):
        err = self.result("unmapped", 0)["error"]
        self.assertIn("process group of ranks [0]", err)
        self.assertIn("groups={name: process_group}", err)
        self.assertEqual(self.coll("unmapped", 0), [])

    def test_manifest(self):
        for m in ("all", "stale"):
            self.assertTrue(os.path.exists(os.path.join(self.tmp.name, "run-" + m, "manifest.json")))


if __name__ == "__main__":
    unittest.main()
