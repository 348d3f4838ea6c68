"""JCS and the build digest, on tests/data/jcs_vectors.json (shared with receipts/format/jcs.c)."""

import hashlib
import json
import os
import unittest

import longstraw_emit as le

VECTORS = os.path.join(os.path.dirname(__file__), "..", "data", "jcs_vectors.json")


class JcsVectors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(VECTORS, encoding="utf-8") as f:
            cls.data = json.load(f)

    def test_every_vector(self):
        self.assertGreaterEqual(len(self.data["vectors"]), 7)
        for v in self.data["vectors"]:
            with self.subTest(v["name"]):
                c = le.jcs(json.loads(v["input"]))
                self.assertEqual(c, v["canonical"])
                self.assertEqual(hashlib.sha256(c.encode("utf-8")).hexdigest(), v["sha256"])
                self.assertEqual(le.jcs_sha256(json.loads(v["input"])), v["sha256"])

    def test_every_refused_input_raises(self):
        self.assertGreaterEqual(len(self.data["refused"]), 3)
        for v in self.data["refused"]:
            with self.subTest(v["name"]):
                with self.assertRaises(le.JcsError):
                    le.jcs(json.loads(v["input"]))

    def test_outside_the_subset(self):
        for bad in ({"x": float("nan")}, {1: "a"}, {"s": "\ud800"}, {"x": object()}, {"x": -(1 << 53)}):
            with self.subTest(repr(bad)):
                self.assertRaises(le.JcsError, le.jcs, bad)
        self.assertEqual(le.jcs({"x": (1 << 53) - 1, "y": [True, None]}), '{"x":9007199254740991,"y":[true,null]}')
        self.assertEqual(le.jcs({"k": "\x7f\u2028"}), '{"k":"\x7f\u2028"}')


class BuildDigest(unittest.TestCase):
    def test_build_identity_vector(self):
        with open(VECTORS, encoding="utf-8") as f:
            v = next(x for x in json.load(f)["vectors"] if x["name"] == "build identity")
        obj = json.loads(v["input"])
        self.assertEqual(le.build_digest(obj["artifacts"]), v["sha256"])

    def test_digest_changes_with_any_artifact(self):
        a = [{"role": "package", "name": "torch", "version": "1.13.0"}]
        b = [{"role": "package", "name": "torch", "version": "1.13.1"}]
        self.assertNotEqual(le.build_digest(a), le.build_digest(b))
        # key order does not matter, array order does
        self.assertEqual(le.build_digest([{"version": "1.13.0", "name": "torch", "role": "package"}]),
                         le.build_digest(a))
        c = a + [{"role": "environment", "name": "X", "value": "1"}]
        self.assertNotEqual(le.build_digest(c), le.build_digest(c[::-1]))

    def test_bad_artifacts_refused(self):
        self.assertRaises(ValueError, le.build_digest, [{"role": "compiler", "name": "gcc"}])
        self.assertRaises(ValueError, le.build_digest, [{"role": "other", "name": ""}])
        self.assertRaises(ValueError, le.build_digest, [{"role": "other", "name": "x", "size": 1.5}])


class CollectArtifacts(unittest.TestCase):
    def test_source_tree_and_environment(self):
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "src")
            os.makedirs(os.path.join(src, "__pycache__"))
            with open(os.path.join(src, "a.py"), "w") as f:
                f.write("x = 1\n")
            with open(os.path.join(src, "__pycache__", "a.pyc"), "wb") as f:
                f.write(b"junk")
            os.environ["LS_EMIT_TEST_VAR"] = "v1"
            arts = le.collect_artifacts(sources=[src], packages=[], env=["LS_EMIT_TEST_VAR", "LS_EMIT_UNSET"],
                                        native_libraries=False)
            roles = [a["role"] for a in arts]
            # the emitter's own code always comes first after the interpreter
            self.assertEqual(roles, ["interpreter", "source", "source", "environment", "environment"])
            self.assertEqual(arts[1]["name"], "longstraw_emit")
            s = arts[2]
            line = hashlib.sha256(b"x = 1\n").hexdigest() + "  a.py\n"
            self.assertEqual(s["sha256"], hashlib.sha256(line.encode()).hexdigest())
            self.assertEqual(arts[3]["value"], "v1")
            self.assertNotIn("value", arts[4])  # unset
            d1 = le.build_digest(arts)
            with open(os.path.join(src, "a.py"), "w") as f:
                f.write("x = 2\n")
            arts2 = le.collect_artifacts(sources=[src], packages=[], env=["LS_EMIT_TEST_VAR", "LS_EMIT_UNSET"],
                                         native_libraries=False)
            self.assertNotEqual(le.build_digest(arts2), d1)

    def test_run_dir_inside_the_source_is_excluded(self):
        import subprocess
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "src")
            os.makedirs(src)
            with open(os.path.join(src, "train.py"), "w") as f:
                f.write("pass\n")
            git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
            if subprocess.run(git + ["init", "-q", d]).returncode != 0:
                self.skipTest("git not available")
            subprocess.run(git + ["-C", d, "add", "."], check=True)
            subprocess.run(git + ["-C", d, "commit", "-qm", "x"], check=True)
            out = os.path.join(src, "out")
            a1 = le.collect_artifacts(sources=[src], packages=[], native_libraries=False, exclude=[out])
            self.assertFalse(a1[2]["dirty"])
            os.makedirs(os.path.join(out, "rank-0000"))
            with open(os.path.join(out, "rank-0000", "events.jsonl"), "w") as f:
                f.write("{}\n")
            a2 = le.collect_artifacts(sources=[src], packages=[], native_libraries=False, exclude=[out])
            self.assertEqual(a1, a2)
            a3 = le.collect_artifacts(sources=[src], packages=[], native_libraries=False)
            self.assertTrue(a3[2]["dirty"])
            self.assertNotEqual(a3[2]["sha256"], a1[2]["sha256"])

    def test_git_source(self):
        here = os.path.dirname(os.path.abspath(__file__))
        arts = le.collect_artifacts(sources=[here], packages=[], native_libraries=False)
        s = arts[2]
        self.assertEqual(s["name"], "tests/python")
        if s["commit"] != "unknown":  # inside a git checkout
            self.assertRegex(s["commit"], "^[0-9a-f]{40}$")
            self.assertIsInstance(s["dirty"], bool)
            self.assertRegex(s["diff_sha256"], "^[0-9a-f]{64}$")



class CodeIdentity(unittest.TestCase):
    """The build identity digests code by content: the same files imported from two places (the
    repository, an installed copy, a copy outside git) are one identity; a difference names the file."""

    def _tree(self, root, files):
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)

    def test_same_code_two_places(self):
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            files = {"train.py": "import model\n", "model.py": "W = 1\n", "sub/x.py": "", "README.md": "docs\n",
                     "__pycache__/model.cpython-311.pyc": "junk", "adapter.json": "{}"}
            a, b = os.path.join(d, "a", "trainer"), os.path.join(d, "b", "trainer")
            self._tree(a, files)
            self._tree(b, files)
            x, y = le.code_artifact(a), le.code_artifact(b)
            self.assertEqual(x, y)
            self.assertEqual(x["name"], "trainer")
            self.assertEqual(sorted(x["files"]), ["model.py", "sub/x.py", "train.py"])  # code only
            self.assertEqual(x["files"]["model.py"], hashlib.sha256(b"W = 1\n").hexdigest())
            lines = "".join(f"{x['files'][k]}  {k}\n" for k in sorted(x["files"]))
            self.assertEqual(x["sha256"], hashlib.sha256(lines.encode()).hexdigest())
            # a documentation change is no code change; a code change names its file
            self._tree(b, {"README.md": "other\n"})
            self.assertEqual(le.code_artifact(b), x)
            self._tree(b, {"model.py": "W = 2\n"})
            z = le.code_artifact(b)
            self.assertNotEqual(z["sha256"], x["sha256"])
            self.assertEqual([k for k in x["files"] if x["files"][k] != z["files"][k]], ["model.py"])
            with self.assertRaisesRegex(ValueError, "code: .*nothing-here"):
                le.code_artifact(os.path.join(d, "nothing-here"))

    def test_emitter_installed_or_not(self):
        """The emitter imported from a copy of its package (as pip installs it) and from the
        repository gives the same build digest (subprocesses, each importing one)."""
        import shutil
        import subprocess
        import sys
        import tempfile

        repo_pkg = os.path.dirname(os.path.abspath(le.__file__))
        code = ("import json, sys, longstraw_emit as le; "
                "a = le.collect_artifacts(packages=[], native_libraries=False); "
                "print(json.dumps([le.__file__, le.build_digest(a)]))")
        with tempfile.TemporaryDirectory() as d:
            site = os.path.join(d, "site-packages")
            shutil.copytree(repo_pkg, os.path.join(site, "longstraw_emit"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            out = {}
            for where in (os.path.dirname(repo_pkg), site):
                env = dict(os.environ, PYTHONPATH=where, PYTHONDONTWRITEBYTECODE="1")
                p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=d,
                                   timeout=120)
                self.assertEqual(p.returncode, 0, p.stderr)
                out[where] = json.loads(p.stdout)
            (f1, d1), (f2, d2) = out.values()
            self.assertNotEqual(os.path.dirname(f1), os.path.dirname(f2))   # two different copies imported
            self.assertEqual(d1, d2)
            with open(os.path.join(site, "longstraw_emit", "run.py"), "a") as f:
                f.write("# changed\n")
            env = dict(os.environ, PYTHONPATH=site, PYTHONDONTWRITEBYTECODE="1")
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=d,
                               timeout=120)
            self.assertNotEqual(json.loads(p.stdout)[1], d1)


if __name__ == "__main__":
    unittest.main()
