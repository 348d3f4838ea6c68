"""Layer hooks (fwd and bwd per layer, recompute under checkpointing) and
tensor digests."""

import hashlib
import os
import struct
import tempfile
import unittest

import common
import tracefile

import longstraw_emit as le

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def _events(d):
    _h, ev, _t = tracefile.read(os.path.join(d, "run", "rank-0000", "events.jsonl.zst"))
    return ev


@unittest.skipIf(torch is None, "torch not installed")
class Hooks(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.tmp = tempfile.TemporaryDirectory()
        self.w = common.writer(self.tmp.name)
        self.ctx = ("replay", 0, 1)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8).double() for _ in range(3)])
        kinds = ["gdn", "attn", "gdn"]
        self.hooks = [le.LayerHooks(self.w, m, layer=i, kind=kinds[i], context=lambda: self.ctx)
                      for i, m in enumerate(self.layers)]

    def tearDown(self):
        for h in self.hooks:
            h.remove()
        if not self.w.closed:
            self.w.close()
        self.tmp.cleanup()

    def _layer_ends(self):
        self.w.close()
        return [e for e in _events(self.tmp.name) if e["ev"] == "layer_end"]

    def test_fwd_and_bwd_per_layer(self):
        x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
        with self.w.phase("replay", 0):
            h = x
            outs = []
            for m in self.layers:
                h = torch.tanh(m(h))
                outs.append(h)
            h.sum().backward()
        le_ = self._layer_ends()
        fwd = [e for e in le_ if e["dir"] == "fwd"]
        bwd = [e for e in le_ if e["dir"] == "bwd"]
        self.assertEqual([e["layer"] for e in fwd], [0, 1, 2])
        self.assertEqual([e["layer"] for e in bwd], [2, 1, 0])  # backward runs in reverse
        self.assertEqual([e["kind"] for e in fwd], ["gdn", "attn", "gdn"])
        for e in le_:
            self.assertEqual((e["phase"], e["step"], e["member"]), self.ctx)
            self.assertEqual(e["tokens"], 10)
            self.assertNotIn("recompute", e)
        # out_norm: the layer's output (before tanh) and the gradient reaching it
        with torch.no_grad():
            y0 = torch.nn.functional.linear(x, self.layers[0].weight, self.layers[0].bias)
        self.assertAlmostEqual(fwd[0]["out_norm"], float(y0.norm()), places=9)
        self.assertGreater(bwd[0]["out_norm"], 0)
        self.assertGreater(fwd[0]["wall_ns"], 0)

    def test_removed_hooks_emit_nothing(self):
        for h in self.hooks:
            h.remove()
        self.layers[0](torch.randn(1, 8, dtype=torch.float64)).sum()
        self.assertEqual(self._layer_ends(), [])

    def _run_checkpointed(self, reentrant):
        x = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)

        def block(h):
            for m in self.layers[:2]:
                h = torch.tanh(m(h))
            return h

        with self.w.phase("replay", 0):
            h = le.checkpoint(block, x, use_reentrant=reentrant)
            h = self.layers[2](h)
            h.sum().backward()
        return self._layer_ends()

    def _check_recompute(self, le_):
        fwd = [(e["layer"], e.get("recompute", False)) for e in le_ if e["dir"] == "fwd"]
        bwd = [e["layer"] for e in le_ if e["dir"] == "bwd"]
        # the forward once each, then the checkpointed block's recompute, tagged
        self.assertEqual(fwd, [(0, False), (1, False), (2, False), (0, True), (1, True)])
        self.assertEqual(bwd, [2, 1, 0])
        self.assertTrue(all("recompute" not in e for e in le_ if e["dir"] == "bwd"))

    def test_recompute_tagged_reentrant(self):
        self._check_recompute(self._run_checkpointed(True))

    def test_recompute_tagged_non_reentrant(self):
        self._check_recompute(self._run_checkpointed(False))

    def test_recomputing_context(self):
        x = torch.randn(1, 8, dtype=torch.float64)
        with le.recomputing():
            self.layers[0](x)
            with torch.no_grad():  # grad disabled: not a recompute
                self.layers[1](x)
        self.assertFalse(le.is_recomputing())
        le_ = self._layer_ends()
        self.assertEqual([(e["layer"], e.get("recompute", False)) for e in le_], [(0, True), (1, False)])

    def test_context_none_writes_nothing(self):
        self.ctx = None
        x = torch.randn(2, 8, dtype=torch.float64, requires_grad=True)
        self.layers[1](self.layers[0](x)).sum().backward()
        self.ctx = ("score", 0, 0)
        self.layers[2](x)
        self.assertEqual([(e["layer"], e["dir"]) for e in self._layer_ends()], [(2, "fwd")])

    def test_context_with_tokens_and_bad_kind(self):
        self.ctx = ("score", 0, 2, 77)
        self.layers[0](torch.randn(3, 8, dtype=torch.float64))
        self.assertEqual(self._layer_ends()[0]["tokens"], 77)
        with self.assertRaises(ValueError):
            le.LayerHooks(self.w, self.layers[0], layer=0, kind="mlp", context=lambda: self.ctx)


@unittest.skipIf(torch is None, "torch not installed")
class TensorDigests(unittest.TestCase):
    def test_bytes_are_little_endian_row_major(self):
        t = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
        want = struct.pack("<4d", 1.0, 2.0, 3.0, 4.0)
        self.assertEqual(le.tensor_bytes(t), want)
        self.assertEqual(le.tensor_bytes(t.t().contiguous().t()), want)  # strides do not matter
        self.assertEqual(le.tensor_bytes(t.t()), struct.pack("<4d", 1.0, 3.0, 2.0, 4.0))
        self.assertEqual(le.tensor_sha256(t), hashlib.sha256(want).hexdigest())

    def test_storage_dtypes(self):
        self.assertEqual(le.tensor_bytes(torch.tensor([1.0], dtype=torch.bfloat16)), b"\x80\x3f")
        self.assertEqual(le.tensor_bytes(torch.tensor([1.0], dtype=torch.float16)), b"\x00\x3c")
        self.assertEqual(le.tensor_bytes(torch.tensor([True, False])), b"\x01\x00")
        self.assertEqual(le.tensor_bytes(torch.tensor(-2, dtype=torch.int32)), struct.pack("<i", -2))
        self.assertEqual(le.trace_dtype(torch.zeros(1, dtype=torch.int8)), "i8")
        self.assertRaises(ValueError, le.tensor_bytes, torch.zeros(1, dtype=torch.complex64))

    def test_param_digests(self):
        with tempfile.TemporaryDirectory() as d:
            w = common.writer(d)
            ps = [("a.weight", torch.arange(6, dtype=torch.float32).reshape(2, 3)),
                  ("b.bias", torch.ones(2, dtype=torch.float64))]
            total = w.param_digests(3, ps)
            w.close()
            ev = [e for e in _events(d) if e["ev"] == "param_digest"]
        hexes = [hashlib.sha256(p.numpy().tobytes()).hexdigest() for _n, p in ps]
        self.assertEqual([(e["target"], e["sha256"], e["step"]) for e in ev],
                         [("a.weight", hexes[0], 3), ("b.bias", hexes[1], 3), ("trainable", total, 3)])
        lines = "".join(f"{n} {h}\n" for (n, _p), h in zip(ps, hexes))
        self.assertEqual(total, hashlib.sha256(lines.encode()).hexdigest())


if __name__ == "__main__":
    unittest.main()
