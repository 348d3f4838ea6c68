"""Trace framing: frames with checksums, envelope, seq/ts order, flush points,
a killed writer's prefix, argument refusals, v1 schemas for unchanged kinds."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import unittest

import common
import tracefile

import longstraw_emit as le

FLUSH_KINDS = {"phase_begin", "phase_end", "error", "rank_complete"}
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def _events_path(d, run="run", rank=0, zst=True):
    return os.path.join(d, run, f"rank-{rank:04d}", "events.jsonl" + (".zst" if zst else ""))


def _fill(w, step=0):
    with w.phase("capture", step):
        for layer in range(3):
            w.layer_end("capture", step, -1, layer, "attn", "fwd", 16, 1.0 + layer, wall_ns=5)
        w.collective("cp", "allreduce", "sum", 4, "f64", 32, "lse_max", layer=1, step=step)
    w.memory(step, "capture", {"weights": (10, 20), "acts": {"live": 1, "peak": 2}})
    w.optimizer_step(step, n_params=3, lr=1e-3, grad_norm=0.5)
    w.step_metrics(step, "grpo", loss=0.25, reward_mean=-1, none_metric=None)


class Framing(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_complete_trace_reads_back(self):
        w = common.writer(self.d)
        _fill(w)
        w.close()
        h, ev, texts = tracefile.read(_events_path(self.d))
        self.assertEqual(list(h)[:3], ["v", "kind", "schema"])
        self.assertEqual(h["v"], 2)
        self.assertEqual(h["schema"], "urn:longstraw:schema:event-header:v2")
        self.assertEqual(h["groups"][1], {"name": "cp", "kind": "cp", "members": [0]})
        self.assertEqual(h["phases"], common.PHASES)
        self.assertEqual(ev[-1]["ev"], "rank_complete")
        self.assertEqual(ev[-1]["events"], len(ev) - 1)
        kinds = [e["ev"] for e in ev]
        self.assertEqual(kinds, ["phase_begin", "layer_end", "layer_end", "layer_end", "collective", "phase_end",
                                 "memory", "optimizer_step", "step_metrics", "rank_complete"])
        sm = ev[8]
        self.assertIsNone(sm["none_metric"])
        self.assertEqual(sm["reward_mean"], -1)
        self.assertIsInstance(ev[1]["tokens"], int)
        self.assertEqual(ev[6]["total_live"], 11)
        self.assertEqual(ev[6]["total_peak"], 22)

    def test_flush_points_end_frames(self):
        w = common.writer(self.d, flush_bytes=2 << 20)
        _fill(w, 0)
        _fill(w, 1)
        w.error("something odd", code=6)
        w.close()
        _h, _ev, texts = tracefile.read(_events_path(self.d))
        # frame 0: the header alone; then every frame ends at a flush kind
        self.assertEqual(tracefile.parse_lines(texts[0])[0]["kind"], "longstraw.trace.header")
        self.assertEqual(len(tracefile.parse_lines(texts[0])), 1)
        for i, t in enumerate(texts[1:]):
            last = tracefile.parse_lines(t)[-1]
            self.assertIn(last["ev"], FLUSH_KINDS, f"frame {i + 1} ends with {last['ev']}")
        # phase_begin, phase_end (x2 steps), error, rank_complete; memory..step_metrics ride
        # in the frame of the next flush
        self.assertEqual(len(texts), 1 + 2 * 2 + 1 + 1)

    def test_flush_past_the_buffer_limit(self):
        w = common.writer(self.d, flush_bytes=4096)
        with w.phase("score", 0):
            for i in range(400):
                w.layer_end("score", 0, i % 4, i % 8, "gdn", "fwd", 1000 + i, 0.5)
        w.close()
        _h, ev, texts = tracefile.read(_events_path(self.d))
        self.assertEqual(len(ev), 403)
        big = [t for t in texts if len(t) > 3000]
        self.assertGreater(len(big), 5)  # the 400 layer_ends span several frames
        self.assertTrue(all(len(t) < 4096 + 400 for t in texts))

    def test_threads_share_one_sequence(self):
        import threading

        w = common.writer(self.d, flush_bytes=8192)
        w.phase_begin("replay", 0)

        def work(t):
            for i in range(300):
                w.layer_end("replay", 0, t, i % 4, "attn", "bwd", 1, float(i))
                w.collective("cp", "allreduce", "sum", 1, "f64", 8, "dkv_sum", layer=t)

        ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        w.phase_end("replay", 0)
        w.close()
        _h, ev, _t = tracefile.read(_events_path(self.d))  # checks seq 0.. and ts order
        coll = [e for e in ev if e["ev"] == "collective"]
        self.assertEqual(sorted(e["gseq"] for e in coll), list(range(1200)))
        self.assertEqual([e["gseq"] for e in coll], list(range(1200)))  # gseq in trace order
        self.assertEqual(sum(e["ev"] == "layer_end" for e in ev), 1200)

    def test_plain_trace(self):
        w = common.writer(self.d, compress=False)
        _fill(w)
        w.close()
        _h, ev, _t = tracefile.read(_events_path(self.d, zst=False))
        self.assertEqual(ev[-1]["ev"], "rank_complete")
        with open(_events_path(self.d, zst=False), "rb") as f:
            self.assertTrue(f.read().endswith(b'"events":9}\n'))

    def test_corrupt_frame_is_seen(self):
        w = common.writer(self.d)
        _fill(w)
        w.close()
        p = _events_path(self.d)
        with open(p, "rb") as f:
            data = bytearray(f.read())
        data[-6] ^= 0x40  # inside the last frame
        with self.assertRaises(Exception):
            tracefile.frames(bytes(data))

    def test_killed_writer_leaves_a_readable_prefix(self):
        code = (
            "import os, signal, sys\n"
            "sys.path[:0] = [%r, %r]\n"
            "import common\n"
            "w = common.writer(%r)\n"
            "w.phase_begin('capture', 0)\n"
            "w.layer_end('capture', 0, -1, 0, 'attn', 'fwd', 4, 1.0)\n"
            "w.phase_end('capture', 0)\n"
            "w.phase_begin('score', 0)\n"
            "w.layer_end('score', 0, 0, 0, 'attn', 'fwd', 4, 1.0)\n"  # buffered, never flushed
            "os.kill(os.getpid(), signal.SIGKILL)\n"
        ) % (os.path.join(ROOT, "python"), os.path.dirname(os.path.abspath(__file__)), self.d)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True)
        self.assertEqual(p.returncode, -signal.SIGKILL, p.stderr.decode())
        with open(_events_path(self.d), "rb") as f:
            texts = tracefile.frames(f.read())
        objs = tracefile.parse_lines(b"".join(texts))
        self.assertEqual([o.get("ev") for o in objs[1:]], ["phase_begin", "layer_end", "phase_end", "phase_begin"])
        self.assertEqual([o["seq"] for o in objs[1:]], [0, 1, 2, 3])
        self.assertFalse(os.path.exists(os.path.join(self.d, "run", "rank-0000", "receipt.json")))


class WithoutTorch(unittest.TestCase):
    def test_core_needs_no_torch(self):
        with tempfile.TemporaryDirectory() as d:
            code = (
                "import sys\n"
                "sys.modules['torch'] = None\n"  # import torch raises ImportError
                "sys.path[:0] = [%r, %r]\n"
                "import common, longstraw_emit as le\n"
                "w = common.writer(%r, artifacts=None)\n"
                "with w.phase('capture', 0):\n"
                "    w.layer_end('capture', 0, -1, 0, 'attn', 'fwd', 4, 1.0)\n"
                "w.param_digests(0, [('w', b'1234')])\n"
                "w.close()\n"
                "le.write_manifest(%r)\n"
                "print([a['role'] for a in w.artifacts])\n"
            ) % (os.path.join(ROOT, "python"), os.path.dirname(os.path.abspath(__file__)), d, os.path.join(d, "run"))
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNotIn("package", p.stdout)
            self.assertIn("interpreter", p.stdout)
            self.assertTrue(os.path.exists(os.path.join(d, "run", "manifest.json")))


class Refusals(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.w = common.writer(self.tmp.name)

    def tearDown(self):
        self.w.trace.abandon()
        self.tmp.cleanup()

    def test_bad_fields_name_themselves(self):
        w = self.w
        cases = [
            (lambda: w.phase_begin("warmup", 0), "phase_begin.phase"),
            (lambda: w.phase_begin("capture", -1), "phase_begin.step"),
            (lambda: w.layer_end("capture", 0, -1, 0, "mlp", "fwd", 1, 1.0), "layer_end.kind"),
            (lambda: w.layer_end("capture", 0, -2, 0, "attn", "fwd", 1, 1.0), "layer_end.member"),
            (lambda: w.layer_end("capture", 0, -1, 0, "attn", "up", 1, 1.0), "layer_end.dir"),
            (lambda: w.layer_end("capture", 0, -1, 0, "attn", "fwd", 1, float("nan")), "layer_end.out_norm"),
            (lambda: w.layer_end("capture", 0, -1, 0, "attn", "fwd", 1, -1.0), "layer_end.out_norm"),
            (lambda: w.layer_end("capture", 0, -1, 0, "attn", "fwd", 1.5, 1.0), "layer_end.tokens"),
            (lambda: w.layer_end("capture", 0, -1, 0, "attn", "fwd", 1 << 53, 1.0), "layer_end.tokens"),
            (lambda: w.collective("tp", "allreduce", "sum", 1, "f64", 8, "x"), "group"),
            (lambda: w.collective("cp", "allsum", "sum", 1, "f64", 8, "x"), "collective.op"),
            (lambda: w.collective("cp", "allreduce", "mean", 1, "f64", 8, "x"), "collective.red"),
            (lambda: w.collective("cp", "allreduce", "sum", 1, "f128", 8, "x"), "collective.dtype"),
            (lambda: w.collective("cp", "allreduce", "sum", 1, "f64", 8, "Bad Purpose"), "collective.purpose"),
            (lambda: w.collective("cp", "allreduce", "sum", 1, "f64", 8, "x", out_sha256="ab"), "out_sha256"),
            (lambda: w.optimizer_step(0, n_params=1, lr=0.1), "optimizer_step: missing"),
            (lambda: w.optimizer_step(0, n_params=1, lr=0.1, grad_norm=1, momentum=0.9), "unknown field"),
            (lambda: w.step_metrics(0, "ppo", loss=1.0), "step_metrics.objective"),
            (lambda: w.step_metrics(0, "grpo", loss="high"), "step_metrics.loss"),
            (lambda: w.step_metrics(0, "grpo", loss=float("nan")), "step_metrics.loss"),
            (lambda: w.step_metrics(0, "grpo", kl=float("-inf")), "step_metrics.kl"),
            (lambda: w.phase_end("capture", 0), "phase_end"),
            (lambda: w.param_digests(0, [("has space", b"x")]), "param_digests name"),
            (lambda: w.param_digests(0, [("trainable", b"x")]), "reserved"),
            (lambda: w.memory(0, "capture", {"kv cache": (1, 2)}), "memory.categories"),
            (lambda: w.memory(0, "capture", {f"c{i}": (1, 2) for i in range(65)}), "memory.categories"),
            (lambda: w.step_metrics(0, "grpo", **{f"m{i}": 1 for i in range(63)}), "step_metrics"),
            (lambda: w.step_metrics(0, "grpo", Loss=1), "step_metrics key"),
            (lambda: w.step_metrics(0, "grpo", prefix_frozen=1), "step_metrics key"),
            (lambda: w.error("x", code=0), "error.code"),
            (lambda: w.error("x", step=1), "step"),
        ]
        for fn, needle in cases:
            with self.subTest(needle):
                with self.assertRaises((ValueError, TypeError)) as cm:
                    fn()
                self.assertIn(needle, str(cm.exception))
        # nothing refused reached the trace
        self.assertEqual(w.trace.events, 0)

    def test_constructor_refusals(self):
        d = self.tmp.name
        cases = [
            (dict(rank=2, world=2), "rank"),
            (dict(phases=[]), "phases"),
            (dict(phases=["Capture"]), "phases[0]"),
            (dict(phases=["a", "a"]), "repeat"),
            (dict(layer_kinds=["x" * 33]), "layer_kinds[0]"),
            (dict(groups=[le.Group("cp", "sp", [0])]), "groups[0].kind"),
            (dict(groups=[le.Group("cp", "cp", [0, 0])]), "groups[0].members"),
            (dict(groups=[le.Group("cp", "cp", [1])]), "groups[0].members"),
            (dict(rank=1, world=2, groups=[le.Group("cp", "cp", [0])]), "does not hold this rank"),
            (dict(config=common.config(objective="ppo")), "config.objective"),
            (dict(config={k: v for k, v in common.config().items() if k != "n_layers"}), "config.n_layers"),
            (dict(config=common.config(cp_ranks=0)), "config.cp_ranks"),
            (dict(config=common.config(model={"eps": float("inf")})), "config.model.eps"),
            (dict(artifacts=[{"role": "x", "name": "y"}]), "artifacts[0].role"),
            (dict(config=common.config(lr=0.1)), "config.lr: not a v2 config key"),
            (dict(config=common.config(faults=["Skip DKV"])), "config.faults[0]"),
        ]
        for kw, needle in cases:
            with self.subTest(needle):
                args = dict(kw)
                rank, world = args.pop("rank", 0), args.pop("world", 1)
                with self.assertRaises((ValueError, TypeError)) as cm:
                    common.writer(d, rank=rank, world=world, run="bad", **args)
                self.assertIn(needle, str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            le.RunWriter(os.path.join(d, "bad"), 0, 1, "r", "p", os.path.join(d, "no-such-profile.json"),
                         phases=["a"], layer_kinds=["b"], config=common.config(), artifacts=[])
        self.assertIn("profile_path", str(cm.exception))

    def test_trace_never_overwritten(self):
        with self.assertRaises(FileExistsError) as cm:
            common.writer(self.tmp.name)
        self.assertIn("never overwritten", str(cm.exception))

    def test_nothing_after_rank_complete(self):
        w = self.w
        w.close()
        self.assertRaises(ValueError, w.phase_begin, "capture", 1)


class V1Schemas(unittest.TestCase):
    """Kinds whose fields v2 keeps (docs/contract.md section 1) validate against
    their v1 schema with v read as 1."""

    def test_unchanged_kinds(self):
        try:
            import jsonschema
        except ImportError:
            self.skipTest("jsonschema not installed")
        with tempfile.TemporaryDirectory() as d:
            w = common.writer(d)
            _fill(w)
            w.param_digests(0, [("w", b"\x00" * 8)])
            w.error("late", code=3)
            w.close()
            _h, ev, _t = tracefile.read(_events_path(d))
        seen = set()
        for e in ev:
            if e["ev"] in ("phase_begin", "phase_end", "optimizer_step", "param_digest", "error", "rank_complete",
                           "memory"):
                with open(os.path.join(ROOT, "schemas", f"event-{e['ev']}.schema.json")) as f:
                    schema = json.load(f)
                jsonschema.validate(dict(e, v=1), schema)
                seen.add(e["ev"])
        self.assertEqual(len(seen), 7)


if __name__ == "__main__":
    unittest.main()
