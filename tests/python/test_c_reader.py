"""The emitter's run directories read by the C readers: `longstraw-validate --v2`
(receipts/tools), named by LS_EMIT_VALIDATE (ctest sets it where the build has
the v2 readers); skipped without it."""

import os
import signal
import subprocess
import sys
import tempfile
import unittest

import common

import longstraw_emit as le

VALIDATE = os.environ.get("LS_EMIT_VALIDATE")
HERE = os.path.dirname(os.path.abspath(__file__))


def _validate(*paths):
    p = subprocess.run([VALIDATE, "--v2", *paths], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def _step(w, step, member_count=2):
    with w.phase("capture", step):
        for layer, kind in enumerate(("embed", "gdn", "attn", "head")):
            w.layer_end("capture", step, -1, layer, kind, "fwd", 8, 1.25)
        w.collective("cp", "allreduce", "max", 2, "f64", 16, "lse_max", layer=2, step=step, out_sha256="a" * 64)
    with w.phase("replay", step):
        for m in range(member_count):
            w.layer_end("replay", step, m, 2, "attn", "fwd", 4, 0.5)
            w.layer_end("replay", step, m, 2, "attn", "fwd", 4, 0.5, recompute=True)
            w.layer_end("replay", step, m, 2, "attn", "bwd", 4, 0.25)
            w.collective("cp", "allreduce", "sum", 3, "bf16", 6, "dkv_sum", layer=2, step=step)
            # a point-to-point message with every new field the C reader must accept
            if w.world == 1:
                pass
            elif w.rank == 0:
                w.collective("cp", "send", "none", 3, "f32", 12, "ring_kv", layer=2, peer=1, tag=3,
                             in_digest="xxh3_128:" + "0" * 32, in_digest_done="xxh3_128:" + "1" * 32)
            else:
                w.collective("cp", "recv", "none", 3, "f32", 0, "ring_kv", layer=2, peer=0, tag=3,
                             out_digest="xxh3_128:" + "0" * 32, declared=True)
    w.memory(step, "replay", {"weights": (100, 100), "kv.cache-0": {"live": 1, "peak": 5}})
    with w.phase("optimizer", step):
        w.optimizer_step(step, n_params=10, lr=1e-3, grad_norm=0.0)
    w.param_digests(step, [("w.0", b"\x01\x02"), ("w.1", b"")])
    w.step_metrics(step, "grpo", loss=-0.5, reward_mean=1, tokens=8, kl=None, **{"x.y-z": 2.5})


@unittest.skipIf(not VALIDATE, "LS_EMIT_VALIDATE (longstraw-validate with --v2) not set")
class CReaders(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_complete_runs_are_valid(self):
        for run, compress in (("zst", True), ("plain", False)):
            for rank in range(2):
                w = common.writer(self.d, rank=rank, world=2, run=run, compress=compress)
                _step(w, 0)
                _step(w, 1)
                w.close(steps=2, steps_exact=2)
            le.write_manifest(os.path.join(self.d, run))
            rc, out = _validate(os.path.join(self.d, run))
            self.assertEqual(rc, 0, out)
            self.assertIn("valid (v2 run)", out)

    def test_paths_and_gradient_probe_are_valid(self):
        """config.paths (receipt and manifest) and gradient_probe events of every verdict, as the C
        readers take them."""
        for rank in range(2):
            w = common.writer(self.d, rank=rank, world=2, run="probe")
            _step(w, 0)
            w.path("responses", "sampled")
            w.path("shards", "uneven", "even")
            g = {"name": "layers.0", "tensors": 3, "derivative": 0.5, "applied": 0.5, "error_estimate": 1e-12,
                 "rounding_floor": 2e-12, "rel_error": 0.0, "tolerance": 1e-6, "h": 1e-4, "decided_alike": True,
                 "verdict": "pass"}
            base = dict(step=0, objective="grpo", grad_mode="full", grouping="layer", h=1e-4, seed=2 ** 53 - 1,
                        evaluations=4, seconds=0.5, tol=1e-6, ranks_agree=True)
            w.gradient_probe(verdict="pass", groups=[g], **base)
            w.gradient_probe(verdict="fail", groups=[dict(g, verdict="fail", rel_error=1.7976931348623157e308)],
                             reason="layers.0", **dict(base, ranks_agree=False))
            w.gradient_probe(verdict="reported", groups=[dict(g, verdict="reported")], **dict(base, grad_mode="detached"))
            w.gradient_probe(verdict="not_applicable", groups=[], reason="a prefix-frozen step",
                             **dict(base, h=0, evaluations=0))
            w.close()
        le.write_manifest(os.path.join(self.d, "probe"))
        rc, out = _validate(os.path.join(self.d, "probe"))
        self.assertEqual(rc, 0, out)

    def test_c_recomputes_the_same_build_digest(self):
        arts = le.collect_artifacts(sources=[HERE], packages=[], env=["HOME", "LS_EMIT_UNSET"], native_libraries=False)
        arts.append({"role": "other", "name": "na\u00efve \u0001\t\"q\" \U0001F600 \ufb33", "size": -(2 ** 53 - 1),
                     "list": [None, True, {"b": 1, "a": ""}]})
        w = common.writer(self.d, world=1, artifacts=arts)
        w.close(steps=0, steps_exact=0)
        run = os.path.join(self.d, "run")
        le.write_manifest(run)
        rc, out = _validate(run)
        self.assertEqual(rc, 0, out)
        # the reader does recompute it: a changed artifact under the same digest is refused
        rec = os.path.join(run, "rank-0000", "receipt.json")
        with open(rec, encoding="utf-8") as f:
            text = f.read()
        with open(rec, "w", encoding="utf-8") as f:
            f.write(text.replace('"size": -9007199254740991', '"size": -9007199254740990'))
        rc, out = _validate(rec)
        self.assertEqual(rc, 1, out)
        self.assertIn("build_digest", out)

    def test_many_frames(self):
        w = common.writer(self.d, world=1, flush_bytes=2048)
        for s in range(20):
            _step(w, s)
        w.close(steps=20)
        le.write_manifest(os.path.join(self.d, "run"))
        self.assertGreater(w.trace.frames, 60)
        rc, out = _validate(os.path.join(self.d, "run"))
        self.assertEqual(rc, 0, out)

    def test_killed_writer_is_incomplete_not_corrupt(self):
        code = ("import os, signal, sys\n"
                "sys.path[:0] = [%r, %r]\n"
                "import common, test_c_reader\n"
                "w = common.writer(%r)\n"
                "test_c_reader._step(w, 0)\n"
                "w.phase_begin('score', 1)\n"
                "w.layer_end('score', 1, 0, 2, 'attn', 'fwd', 4, 1.0)\n"
                "os.kill(os.getpid(), signal.SIGKILL)\n") % (os.path.join(HERE, "..", "..", "python"), HERE, self.d)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertEqual(p.returncode, -signal.SIGKILL, p.stderr)
        rc, out = _validate(os.path.join(self.d, "run", "rank-0000", "events.jsonl.zst"))
        self.assertEqual(rc, 1, out)
        self.assertIn("incomplete", out)
        self.assertNotIn("corrupt", out)

    def test_tampered_run_is_invalid(self):
        w = common.writer(self.d, world=1)
        _step(w, 0)
        w.close()
        run = os.path.join(self.d, "run")
        le.write_manifest(run)
        with open(os.path.join(run, "rank-0000", "receipt.json"), "a") as f:
            f.write(" ")
        rc, out = _validate(run)
        self.assertEqual(rc, 1, out)


if __name__ == "__main__":
    unittest.main()
