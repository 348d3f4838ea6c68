#!/usr/bin/env python3
"""generate.py BUILD_DIR [SCRATCH] [--class NAME]...: the audit's adversarial
generators (docs/evidence.md, "The adversarial suite"), one per class of
attack, each producing many variants of real runs made here by
longstraw-train (signed, with a signed parity report beside them: the
documented CI gate `--require-signed --require-level 4 --key K --parity-key
K`), every one of which must be refused by the rule of its class:

  swap      a file of the run changed while the audit runs (the n-th open of
            it answered by other bytes, put back after; tests/evidence/
            swap_preload.c): refused by the rule that binds those bytes
            (manifest.digests, manifest.signature, parity.signature), and
            --html / --timeline refuse to draw bytes other than those judged
  facts     every fact with a second source edited in one of them, the
            digests recomputed and the run signed again (an adversary with
            the key, or a buggy trainer): sources.agree fails naming both
  groups    every field of every trace header's group table edited: the same
  sequence  every phase of a step moved, dropped or duplicated, and a layer
            event duplicated: steps.sequence (tests/evidence/gen_sequence.py)

Prints one line per class (variants produced, refused) and each variant not
refused; exit 1 when any was not.  Needs mpirun, zstd and longstraw-sign."""
import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))


class Ctx:
    def __init__(self, build, scratch):
        self.build = build
        self.t = scratch
        self.train = os.path.join(build, "trainer", "longstraw-train")
        self.audit = os.path.join(build, "audit", "longstraw-audit")
        self.sign = os.path.join(build, "receipts", "longstraw-sign")
        self.preload = os.path.join(build, "tests", "libls_swap_preload.so")
        self.key = os.path.join(scratch, "k.pem")
        self.pub = os.path.join(scratch, "k.pub")
        self.failures = []
        self.counts = {}

    def run(self, args, env=None, check=True):
        e = dict(os.environ)
        e.setdefault("OMP_NUM_THREADS", "1")
        if env:
            e.update(env)
        p = subprocess.run(args, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if check and p.returncode != 0:
            raise RuntimeError("%s: exit %d: %s%s" % (" ".join(args), p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
        return p

    # ---- runs ----
    def make_run(self, name, np_, extra):
        out = os.path.join(self.t, name)
        shutil.rmtree(out, ignore_errors=True)
        cmd = [self.train, "--config", os.path.join(SRC, "configs", "hybrid-tiny.json"), "--prompt-len", "64",
               "--group", "2", "--response-len", "4", "--dtype", "f64", "--quiet", "--out", out] + extra
        if np_ > 1:
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np_)] + cmd
        self.run(cmd)
        self.seal(out)
        return out

    def seal(self, run):
        """A parity report for run (make_report.py), both signed with the CI key."""
        for f in ("manifest.dsse.json", "parity.json", "parity.dsse.json"):
            if os.path.exists(os.path.join(run, f)):
                os.unlink(os.path.join(run, f))
        self.run([self.sign, "sign", run, "--key", self.key])
        self.run([sys.executable, os.path.join(HERE, "make_report.py"), run, os.path.join(run, "parity.json")])
        self.run([self.sign, "sign-parity", os.path.join(run, "parity.json"), "--key", self.key])

    def gate(self, run, extra=(), env=None):
        """The CI gate on run: (exit status, report or None, stderr)."""
        rep = os.path.join(self.t, "report.json")
        if os.path.exists(rep):
            os.unlink(rep)
        p = self.run([self.audit, run, "--require-signed", "--require-level", "4", "--key", self.pub,
                      "--parity-key", self.pub, "--json", rep, "--quiet"] + list(extra), env=env, check=False)
        doc = None
        if os.path.exists(rep):
            try:
                doc = json.load(open(rep))
            except ValueError:
                doc = None
        return p.returncode, doc, p.stderr

    def redigest(self, run):
        """What an adversary with write access does after an edit: the manifest's digests recomputed."""
        self.run([sys.executable, os.path.join(HERE, "redigest.py"), run])

    def verdict(self, cls, name, refused, why, counted=True):
        """A variant's outcome; counted=False: a control (no attack reached the audit), not a variant."""
        c = self.counts.setdefault(cls, [0, 0, 0])
        if counted:
            c[0] += 1
            c[1] += 1 if refused else 0
        else:
            c[2] += 1
        if not refused:
            self.failures.append("%s: %s: %s" % (cls, name, why))


def rule(doc, rid):
    for lv in (doc or {}).get("levels", []):
        for c in lv["checks"]:
            if c["id"] == rid:
                return c
    return None


def rule_text(c):
    return c["message"] + " " + " ".join(e["file"] + ": " + e["detail"] for e in c.get("evidence", []))


def failed_naming(doc, rid, *subs):
    """'' when rule rid failed and its text names every sub; else why not."""
    c = rule(doc, rid)
    if c is None:
        return "no rule %s in the report" % rid
    if c["verdict"] != "fail":
        return "%s is %s" % (rid, c["verdict"])
    t = rule_text(c)
    for s in subs:
        if s not in t:
            return "%s does not name %r: %s" % (rid, s, t[:400])
    return ""


# ---- class swap ------------------------------------------------------------------


def zstd_lines(path):
    return subprocess.run(["zstd", "-dcq", path], stdout=subprocess.PIPE, check=True).stdout


def zstd_write(path, data, level):
    subprocess.run(["zstd", "-q", "-f", "--check", "-%d" % level, "-o", path], input=data, check=True)


def swap_edits(run, rel):
    """(label, bytes) of other contents for run/rel: a change of meaning and
    a change of bytes only (the same content written differently)."""
    p = os.path.join(run, rel)
    raw = open(p, "rb").read()
    out = []
    if rel.endswith(".zst"):
        text = zstd_lines(p)
        lines = text.split(b"\n")
        for i, ln in enumerate(lines):  # meaning: one layer's wall time
            if b'"layer_end"' in ln and b'"wall_ns":' in ln:
                a = ln.index(b'"wall_ns":') + len(b'"wall_ns":')
                b = a
                while ln[b:b + 1].isdigit():
                    b += 1
                lines[i] = ln[:a] + str(int(ln[a:b]) + 1).encode() + ln[b:]
                break
        tmp = p + ".gen"
        zstd_write(tmp, b"\n".join(lines), 3)
        out.append(("an event edited", open(tmp, "rb").read()))
        zstd_write(tmp, text, 19)
        out.append(("the same events compressed again", open(tmp, "rb").read()))
        os.unlink(tmp)
    else:
        d = json.loads(raw)
        e = copy.deepcopy(d)
        if "predicate" in e and isinstance(e["predicate"], dict) and "config" in e["predicate"]:
            e["predicate"]["config"]["grad_mode"] = "full" if d["predicate"]["config"].get("grad_mode") != "full" \
                else "detached"
        elif "payload" in e:
            e["payload"] = e["payload"][:-4] + ("AAAA" if not e["payload"].endswith("AAAA") else "BBBB")
        else:
            e["tampered"] = True
        out.append(("a field edited", json.dumps(e).encode()))
        out.append(("the same document with a trailing newline", raw + b"\n"))
    return out


def gen_swap(ctx, run):
    """Every file the audit reads, every content, every schedule of opens."""
    files = sorted(s["name"] for s in json.load(open(os.path.join(run, "manifest.json")))["subject"])
    files += ["manifest.json", "manifest.dsse.json", "parity.json", "parity.dsse.json"]
    for rel in files:
        for label, data in swap_edits(run, rel):
            with_path = os.path.join(ctx.t, "swap.with")
            open(with_path, "wb").write(data)
            for sched in ("1", "2", "all"):
                log = os.path.join(ctx.t, "swap.log")
                if os.path.exists(log):
                    os.unlink(log)
                env = {"LD_PRELOAD": ctx.preload, "LS_SWAP_PATH": os.path.realpath(os.path.join(run, rel)),
                       "LS_SWAP_WITH": with_path, "LS_SWAP_OPENS": sched, "LS_SWAP_LOG": log}
                html, tl = os.path.join(ctx.t, "page.html"), os.path.join(ctx.t, "timeline.json")
                for f in (html, tl):
                    if os.path.exists(f):
                        os.unlink(f)
                rc, doc, err = ctx.gate(run, ["--html", html, "--timeline", tl], env=env)
                opens = open(log).read().split("\n") if os.path.exists(log) else []
                hit = [ln.split()[1] for ln in opens if ln.endswith("swapped")]
                name = "%s, %s, open(s) %s swapped (%s)" % (rel, label, sched, ",".join(hit) or "none hit")
                if not hit or (rel.endswith(".dsse.json") and label.startswith("the same")):
                    # the swap met no read, or changed an envelope's bytes but not what it signs: the verdict
                    # rests on what was signed and must be the honest one
                    ctx.verdict("swap", name, rc == 0 and doc is not None and doc["level"] == 4,
                                "no read of signed bytes was swapped, yet the honest verdict changed: exit %d" % rc,
                                counted=False)
                    continue
                why = ""
                if rc == 0:
                    why = "the gate passed (level %s)" % (doc or {}).get("level")
                elif "1" in hit:  # the bytes judged were the swapped ones: the rule that binds them fails
                    want = {"manifest.json": ("manifest.signature",), "manifest.dsse.json": ("manifest.signature",),
                            "parity.json": ("parity.signature",), "parity.dsse.json": ("parity.signature",)}
                    rid = want.get(rel, ("manifest.digests",))[0]
                    why = failed_naming(doc, rid, *(() if rid != "manifest.digests" else (rel,)))
                else:  # judged the real bytes; a later read (--html, --timeline) met others and refused to draw
                    if rc != 2 or "changed while the audit ran" not in err or rel not in err:
                        why = "exit %d, a later read of other bytes not refused: %s" % (rc, err.strip()[-300:])
                    elif os.path.exists(html) and os.path.exists(tl):
                        why = "the page and the timeline were both written"
                ctx.verdict("swap", name, why == "", why)


# ---- main ------------------------------------------------------------------------

CLASSES = {"swap": gen_swap}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("scratch", nargs="?")
    ap.add_argument("--class", dest="classes", action="append", choices=sorted(CLASSES))
    a = ap.parse_args()
    scratch = a.scratch or tempfile.mkdtemp(prefix="ls-generate.")
    os.makedirs(scratch, exist_ok=True)
    ctx = Ctx(os.path.abspath(a.build), os.path.abspath(scratch))
    for f in (ctx.key, ctx.pub):
        if os.path.exists(f):
            os.unlink(f)
    ctx.run([ctx.sign, "keygen", "--private", ctx.key, "--public", ctx.pub])
    run = ctx.make_run("cp2", 2, ["--grad-mode", "full", "--steps", "2"])
    rc, doc, err = ctx.gate(run)
    if rc != 0:
        print("FAIL the honest signed run does not pass the gate: exit %d, level %s: %s" %
              (rc, (doc or {}).get("level"), err[-500:]))
        return 1
    for cls in a.classes or sorted(CLASSES):
        CLASSES[cls](ctx, run)
    for cls, (n, ok, ctl) in sorted(ctx.counts.items()):
        print("%-9s %5d variant(s), %5d refused by the right rule%s" %
              (cls, n, ok, ", %d control(s) that reached no read kept the honest verdict" % ctl if ctl else ""))
    for f in ctx.failures:
        print("FAIL " + f)
    return 1 if ctx.failures else 0


if __name__ == "__main__":
    sys.exit(main())
