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
        env = dict(os.environ, OMP_NUM_THREADS="1")
        procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "dist_worker.py"), cls.tmp.name, str(r), "2"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(2)]
        cls.outs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise
            cls.outs.append((p.returncode, out.decode(errors="replace")))
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
        self.assertEqual([e["gseq"] for e in c0], list(range(8)))
        strip = lambda e: {k: v for k, v in e.items() if k not in ("rank", "seq", "ts_ns", "out_sha256")}
        # send on rank 0 pairs with recv on rank 1 at the same gseq
        self.assertEqual([e["op"] for e in c0],
                         ["allreduce", "allreduce", "allreduce", "broadcast", "allgather", "send", "allreduce",
                          "allreduce"])
        self.assertEqual(c1[5]["op"], "recv")
        for a, b in zip(c0, c1):
            if a["op"] not in ("send", "recv"):
                self.assertEqual(strip(a), strip(b))
        w0 = self._coll(0, "world")
        self.assertEqual([(e["gseq"], e["op"], e["red"], e["count"]) for e in w0], [(0, "barrier", "none", 0)])

    def test_fields(self):
        c0 = self._coll(0, "cp")
        self.assertEqual((c0[0]["red"], c0[0]["count"], c0[0]["dtype"], c0[0]["bytes"], c0[0]["purpose"],
                          c0[0]["layer"], c0[0]["step"]), ("sum", 4, "f64", 32, "dkv_sum", 1, 0))
        self.assertEqual((c0[1]["red"], c0[1]["dtype"], c0[1]["bytes"]), ("max", "f32", 8))
        self.assertEqual(c0[2]["red"], "avg")
        self.assertEqual((c0[3]["red"], c0[3]["dtype"]), ("none", "i64"))
        self.assertEqual((c0[4]["dtype"], c0[4]["count"], c0[4]["bytes"]), ("f16", 2, 4))
        self.assertNotIn("out_sha256", c0[5])  # send: nothing every member holds

    def test_performed_collectives_have_equal_digests(self):
        c0, c1 = self._coll(0, "cp"), self._coll(1, "cp")
        for i in (0, 1, 2, 3, 4, 7):
            with self.subTest(gseq=i):
                self.assertRegex(c0[i]["out_sha256"], "^[0-9a-f]{64}$")
                self.assertEqual(c0[i]["out_sha256"], c1[i]["out_sha256"])
        summed = torch.arange(4, dtype=torch.float64) * 3
        self.assertEqual(c0[0]["out_sha256"], le.tensor_sha256(summed))

    def test_fake_reduction_digests_differ(self):
        c0, c1 = self._coll(0, "cp"), self._coll(1, "cp")
        self.assertEqual((c0[6]["op"], c0[6]["purpose"]), ("allreduce", "dkv_sum"))
        self.assertNotEqual(c0[6]["out_sha256"], c1[6]["out_sha256"])
        self.assertEqual(c0[6]["out_sha256"], le.tensor_sha256(torch.arange(4, dtype=torch.float64)))

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


if __name__ == "__main__":
    unittest.main()
