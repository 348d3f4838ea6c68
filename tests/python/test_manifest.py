"""Receipts and the manifest: digests match the files, ranks must agree,
missing and failed ranks, no temp files left."""

import hashlib
import json
import os
import tempfile
import unittest

import common
import tracefile

import longstraw_emit as le


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _load(path):
    with open(path) as f:
        return json.load(f)


class ReceiptAndManifest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        self.run = os.path.join(self.d, "run")

    def tearDown(self):
        self.tmp.cleanup()

    def _rank(self, rank, world=2, steps=1, **kw):
        w = common.writer(self.d, rank=rank, world=world, **kw)
        with w.phase("capture", 0):
            w.layer_end("capture", 0, -1, 0, "attn", "fwd", 4, 1.0)
        with w.phase("capture", 1):
            pass
        with w.phase("optimizer", 1):
            pass
        w.close(steps=steps)
        return w

    def test_receipt_digests_its_trace(self):
        self._rank(0)
        r = _load(os.path.join(self.run, "rank-0000", "receipt.json"))
        self.assertEqual(r["predicateType"], "urn:longstraw:predicate:rank-receipt:v2")
        p = r["predicate"]
        ev = os.path.join(self.run, p["events"]["file"])
        self.assertEqual(r["subject"], [{"name": "rank-0000/events.jsonl.zst", "digest": {"sha256": _sha(ev)}}])
        _h, events, _t = tracefile.read(ev)
        self.assertEqual(p["events"]["count"], len(events))
        self.assertEqual(p["events"]["last_seq"], events[-1]["seq"])
        self.assertEqual(p["profile"], {"name": "torch-cp", "sha256": _sha(common.profile(self.d))})
        self.assertEqual(p["build"]["build_digest"], le.build_digest(common.ARTIFACTS))
        self.assertEqual(p["config"], common.config())
        self.assertEqual([(x["phase"], x["count"]) for x in p["phases"]], [("capture", 2), ("optimizer", 1)])
        self.assertEqual(p["phases"][0]["wall_ns_total"],
                         sum(e["wall_ns"] for e in events if e["ev"] == "phase_end" and e["phase"] == "capture"))
        self.assertEqual((p["status"], p["steps"], p["steps_exact"], p["rank"], p["world"]), ("complete", 1, 1, 0, 2))
        self.assertEqual(sorted(os.listdir(os.path.join(self.run, "rank-0000"))),
                         ["events.jsonl.zst", "receipt.json"])  # no temp file left

    def test_manifest_over_every_file(self):
        self._rank(0)
        self._rank(1)
        le.write_manifest(self.run)
        m = _load(os.path.join(self.run, "manifest.json"))
        self.assertEqual(m["predicateType"], "urn:longstraw:predicate:run-manifest:v2")
        for s in m["subject"]:
            self.assertEqual(s["digest"]["sha256"], _sha(os.path.join(self.run, s["name"])))
        self.assertEqual(m["predicate"]["files"], 4)
        r0 = _load(os.path.join(self.run, "rank-0000", "receipt.json"))["predicate"]
        for k in ("run_id", "world", "profile", "build", "config"):
            self.assertEqual(m["predicate"][k], r0[k])
        # rewriting lists the same files (manifest.json itself is never a subject)
        le.write_manifest(self.run)
        self.assertEqual(_load(os.path.join(self.run, "manifest.json")), m)

    def test_concurrent_writer_is_refused(self):
        # two processes writing one manifest (the torch_cp example under --dp once did: a CP rank 0 per replica)
        # must not list the other's temporary file as a subject
        self._rank(0)
        self._rank(1)
        with open(os.path.join(self.run, ".manifest.json.tmp.4242"), "w") as f:
            f.write("{")
        with self.assertRaises(le.ManifestError) as cm:
            le.write_manifest(self.run)
        self.assertIn("another process is writing this run's manifest", str(cm.exception))
        self.assertFalse(os.path.exists(os.path.join(self.run, "manifest.json")))

    def test_missing_rank(self):
        self._rank(0, world=3)
        self._rank(2, world=3)
        le.write_manifest(self.run)
        ranks = _load(os.path.join(self.run, "manifest.json"))["predicate"]["ranks"]
        self.assertEqual(ranks[1], {"rank": 1, "receipt": None, "status": "missing"})

    def test_ranks_must_agree(self):
        self._rank(0)
        self._rank(1, config=common.config(n_layers=3))
        with self.assertRaises(le.ManifestError) as cm:
            le.write_manifest(self.run)
        self.assertIn("rank-0001/receipt.json: config differs", str(cm.exception))
        self.assertFalse(os.path.exists(os.path.join(self.run, "manifest.json")))

    def test_build_must_agree(self):
        self._rank(0)
        self._rank(1, artifacts=common.ARTIFACTS + [{"role": "other", "name": "x"}])
        with self.assertRaises(le.ManifestError) as cm:
            le.write_manifest(self.run)
        self.assertIn("build differs", str(cm.exception))

    def test_changed_trace_is_refused(self):
        self._rank(0, world=1)
        ev = os.path.join(self.run, "rank-0000", "events.jsonl.zst")
        with open(ev, "ab") as f:
            f.write(b"\0")
        with self.assertRaises(le.ManifestError) as cm:
            le.write_manifest(self.run)
        self.assertIn("digest of rank-0000/events.jsonl.zst", str(cm.exception))

    def test_error_status(self):
        w = common.writer(self.d, world=1)
        with self.assertRaises(RuntimeError):
            with w:
                with w.phase("score", 0):
                    raise RuntimeError("boom")
        p = _load(os.path.join(self.run, "rank-0000", "receipt.json"))["predicate"]
        self.assertEqual(p["status"], "error")
        self.assertEqual(p["error"], {"code": 12, "message": "RuntimeError: boom"})
        _h, events, _t = tracefile.read(os.path.join(self.run, "rank-0000", "events.jsonl.zst"))
        self.assertEqual([e["ev"] for e in events], ["phase_begin", "phase_end", "error"])
        self.assertFalse(events[1]["ok"])
        self.assertEqual(events[2]["status"], "internal error")
        le.write_manifest(self.run)
        self.assertEqual(_load(os.path.join(self.run, "manifest.json"))["predicate"]["ranks"][0]["status"], "error")

    def test_hostile_receipts_are_refused(self):
        self._rank(0, world=1)
        rec = os.path.join(self.run, "rank-0000", "receipt.json")
        good = _load(rec)

        def bad(mutate, needle):
            doc = json.loads(json.dumps(good))
            mutate(doc)
            with open(rec, "w") as f:
                json.dump(doc, f)
            with self.assertRaises(le.ManifestError) as cm:
                le.write_manifest(self.run)
            self.assertIn(needle, str(cm.exception))

        bad(lambda d: d["predicate"]["events"].update(file="../../etc/passwd"), "predicate.events.file")
        bad(lambda d: d["predicate"]["events"].update(file="/etc/passwd"), "predicate.events.file")
        bad(lambda d: d["predicate"].pop("config"), "predicate.config: missing")
        bad(lambda d: d["predicate"].update(world=True), "predicate.world")
        bad(lambda d: d["predicate"].update(status="done"), "predicate.status")
        bad(lambda d: d.update(subject=[]), "subject")
        bad(lambda d: d.update(predicateType="urn:longstraw:predicate:rank-receipt:v1"), "not a v2 rank receipt")
        bad(lambda d: d["predicate"]["build"].update(build_digest="0" * 64), "build_digest does not match")
        bad(lambda d: d["predicate"]["build"]["artifacts"].append({"role": "other", "name": "x", "f": 0.5}),
            "build.artifacts")
        with open(rec, "w") as f:
            f.write("[1, 2")
        self.assertRaises(le.ManifestError, le.write_manifest, self.run)
        with open(rec, "w") as f:
            f.write("[]")
        self.assertRaises(le.ManifestError, le.write_manifest, self.run)

    def test_no_receipts(self):
        os.makedirs(self.run)
        self.assertRaises(le.ManifestError, le.write_manifest, self.run)


SCHEMAS = os.environ.get("LS_EMIT_SCHEMAS") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                             "schemas")


class V2Schemas(unittest.TestCase):
    """Receipts and manifest validate against schemas/receipt-v2 and
    manifest-v2 (skipped where those schemas or jsonschema are absent)."""

    def setUp(self):
        try:
            import jsonschema  # noqa: F401
        except ImportError:
            self.skipTest("jsonschema not installed")
        for n in ("receipt-v2", "manifest-v2"):
            if not os.path.exists(os.path.join(SCHEMAS, f"{n}.schema.json")):
                self.skipTest(f"{SCHEMAS}/{n}.schema.json absent")

    def test_receipts_and_manifest(self):
        import jsonschema

        with tempfile.TemporaryDirectory() as d:
            run = os.path.join(d, "run")
            for rank in range(2):
                w = common.writer(d, rank=rank, world=2, artifacts=le.collect_artifacts(
                    sources=[os.path.dirname(os.path.abspath(__file__))], packages=[], env=["LS_EMIT_UNSET", "HOME"],
                    native_libraries=False))
                with w.phase("capture", 0):
                    pass
                w.close()
            w = common.writer(d, rank=0, world=1, run="failed")
            w.error("it broke", code=3)
            w.close(status="error", steps=0)
            le.write_manifest(run)
            le.write_manifest(os.path.join(d, "failed"))
            docs = [("receipt-v2", os.path.join(run, "rank-0000", "receipt.json")),
                    ("receipt-v2", os.path.join(run, "rank-0001", "receipt.json")),
                    ("receipt-v2", os.path.join(d, "failed", "rank-0000", "receipt.json")),
                    ("manifest-v2", os.path.join(run, "manifest.json")),
                    ("manifest-v2", os.path.join(d, "failed", "manifest.json"))]
            for schema, path in docs:
                with self.subTest(path):
                    jsonschema.validate(_load(path), _load(os.path.join(SCHEMAS, f"{schema}.schema.json")))


if __name__ == "__main__":
    unittest.main()
