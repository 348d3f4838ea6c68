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
sys.path.insert(0, HERE)
from run_edit import dump, read_trace, redigest, write_trace  # noqa: E402


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
        self.skipped = {}  # edits no signer would sign (schema-invalid): not variants
        self.use_metrics = True  # --metrics (an older audit, --audit, has none)

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
        self.metrics = os.path.join(self.t, name + ".metrics.jsonl")
        if os.path.exists(self.metrics):
            os.unlink(self.metrics)  # the trainer never overwrites an output
        cmd = [self.train, "--config", os.path.join(SRC, "configs", "hybrid-tiny.json"), "--prompt-len", "64",
               "--group", "2", "--response-len", "4", "--dtype", "f64", "--quiet", "--out", out,
               "--metrics", self.metrics] + extra
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

    def gate(self, run, extra=(), env=None, metrics=None):
        """The CI gate on run, with the trainer's metrics lines: (exit status, report or None, stderr)."""
        rep = os.path.join(self.t, "report.json")
        if os.path.exists(rep):
            os.unlink(rep)
        p = self.run([self.audit, run, "--require-signed", "--require-level", "4", "--key", self.pub,
                      "--parity-key", self.pub, "--json", rep, "--quiet"] +
                     (["--metrics", metrics or self.metrics] if self.use_metrics else []) + list(extra), env=env,
                     check=False)
        doc = None
        if os.path.exists(rep):
            try:
                doc = json.load(open(rep))
            except ValueError:
                doc = None
        return p.returncode, doc, p.stderr

    def redigest(self, run, receipts=False):
        """What an adversary with write access does after an edit: the digests recomputed (redigest.py)."""
        redigest(run, receipts)

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


def swap_edits(run, rel):
    """(label, bytes) of other contents for run/rel: a change of meaning and
    a change of bytes only (the same content written differently)."""
    p = os.path.join(run, rel)
    raw = open(p, "rb").read()
    out = []
    if rel.endswith(".zst"):
        lines = read_trace(p)
        edited = list(lines)
        for i, ln in enumerate(edited):  # meaning: one layer's wall time
            if '"layer_end"' in ln and '"wall_ns":' in ln:
                ev = json.loads(ln)
                ev["wall_ns"] += 1
                edited[i] = dump(ev)
                break
        tmp = p + ".gen"
        write_trace(tmp, edited, 3)
        out.append(("an event edited", open(tmp, "rb").read()))
        write_trace(tmp, lines, 19)
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


# ---- edits of a copy, then digests and signature made anew (an adversary with the key) ----


def trace_edit(path, fn):
    """fn(lines) edits the decoded events of a trace in place (a list of dicts, line 0 the header)."""
    events = [json.loads(x) for x in read_trace(path) if x.strip()]
    fn(events)
    write_trace(path, [dump(e) for e in events])


def json_edit(path, fn):
    d = json.load(open(path))
    fn(d)
    json.dump(d, open(path, "w"))


def variant(ctx, run, edits, resubject=True):
    """A copy of run with edits [(rel, kind, fn)] applied, its digests recomputed (each receipt's digest of
    its trace when resubject, then the manifest's) and signed again."""
    out = os.path.join(ctx.t, "variant")
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(run, out)
    for rel, kind, fn in edits:
        (trace_edit if kind == "trace" else json_edit)(os.path.join(out, rel), fn)
    ctx.redigest(out, resubject)
    keep = os.path.join(ctx.t, "parity.keep")
    shutil.rmtree(keep, ignore_errors=True)
    os.makedirs(keep)
    for f in ("manifest.dsse.json", "parity.json", "parity.dsse.json"):
        if os.path.exists(os.path.join(out, f)):
            shutil.move(os.path.join(out, f), os.path.join(keep, f))
    if ctx.run([ctx.sign, "sign", out, "--key", ctx.key], check=False).returncode != 0:
        return None  # not a valid document: the signer refuses it (manifest.valid, receipts.valid judge those)
    for f in ("parity.json", "parity.dsse.json"):
        if os.path.exists(os.path.join(keep, f)):
            shutil.move(os.path.join(keep, f), os.path.join(out, f))
    return out


def expect_refused(ctx, cls, name, out, rules, *subs):
    """The gate fails and one of rules failed, its text naming every sub."""
    if out is None:
        ctx.skipped[cls] = ctx.skipped.get(cls, 0) + 1
        return
    rc, doc, err = ctx.gate(out)
    if rc == 0:
        ctx.verdict(cls, name, False, "the gate passed (level %s)" % (doc or {}).get("level"))
        return
    whys = [failed_naming(doc, rid, *subs) for rid in rules]
    ok = any(w == "" for w in whys)
    ctx.verdict(cls, name, ok, "; ".join(whys))


ENUMS = {"family": ["hybrid", "mla"], "train_mode": ["lora", "full"], "grad_mode": ["full", "detached"],
         "strategy": ["longstraw", "naive"], "objective": ["grpo", "sft"], "dtype": ["f64", "f32"],
         "lora_init": ["zero", "random"], "keep_reference": ["on", "off", "auto"]}


def other(v, key=None):
    """Another value of the same kind (another member of its enum)."""
    if key in ENUMS and v in ENUMS[key]:
        e = ENUMS[key]
        return e[(e.index(v) + 1) % len(e)]
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 1
    if isinstance(v, float):
        return v * 1.5 + 1
    if isinstance(v, str):
        return v + "x"
    if isinstance(v, list):
        return v[:-1] if v else [0]
    if isinstance(v, dict):
        w = dict(v)
        w["edited"] = 1
        return w
    return 1


def set_path(d, keys, v):
    for k in keys[:-1]:
        d = d[k]
    d[keys[-1]] = v


def get_path(d, keys):
    for k in keys:
        d = d[k]
    return d


def gen_facts(ctx, run):
    """Every fact with a second source, edited in one of them."""
    man = json.load(open(os.path.join(run, "manifest.json")))
    world = man["predicate"]["world"]
    ranks = ["rank-%04d" % i for i in range(world)]
    recs = {r: json.load(open(os.path.join(run, r, "receipt.json"))) for r in ranks}
    # the configuration: every key, top level and one level down, in the manifest and in each receipt
    cfg = man["predicate"]["config"]
    keys = []
    for k, v in cfg.items():
        if isinstance(v, dict) and v:
            keys += [[k, k2] for k2 in v]
        else:
            keys.append([k])
    for src in ["manifest.json"] + [r + "/receipt.json" for r in ranks]:
        for ks in keys:
            def ed(d, ks=ks):
                c = d["predicate"]["config"]
                set_path(c, ks, other(get_path(c, ks), ks[-1]))
            out = variant(ctx, run, [(src, "json", ed)])
            expect_refused(ctx, "facts", "%s: config.%s" % (src, ".".join(ks)), out, ["sources.agree"],
                           'config "%s' % ks[0])
    for src in ["manifest.json"] + [r + "/receipt.json" for r in ranks]:
        for k in ("run_id", "world"):
            out = variant(ctx, run, [(src, "json", lambda d, k=k: d["predicate"].__setitem__(k, other(d["predicate"][k])))])
            expect_refused(ctx, "facts", "%s: %s" % (src, k), out, ["sources.agree", "receipts.agree"], k)
        def bd(d):
            d["predicate"]["build"]["compiler"] = other(d["predicate"]["build"].get("compiler", ""))
        out = variant(ctx, run, [(src, "json", bd)])
        expect_refused(ctx, "facts", "%s: build.compiler" % src, out, ["sources.agree", "build.digest_equal"], "build")
    # the manifest's account of each rank
    for i, r in enumerate(ranks):
        for field, val in (("status", "error"), ("receipt", ranks[(i + 1) % world] + "/receipt.json")):
            def ed(d, i=i, field=field, val=val):
                for e in d["predicate"]["ranks"]:
                    if e["rank"] == i:
                        e[field] = val
            out = variant(ctx, run, [("manifest.json", "json", ed)])
            expect_refused(ctx, "facts", "manifest.json: ranks[%d].%s" % (i, field), out,
                           ["sources.agree", "receipts.agree", "manifest.valid"], "ranks.%d.%s" % (i, field))
    out = variant(ctx, run, [("manifest.json", "json", lambda d: d["predicate"].__setitem__("files", d["predicate"]["files"] + 1))])
    expect_refused(ctx, "facts", "manifest.json: files", out, ["sources.agree", "manifest.valid"], "files")
    # each receipt's account of its rank
    for i, r in enumerate(ranks):
        rel = r + "/receipt.json"
        p = recs[r]["predicate"]
        simple = [("host", ["host"]), ("ranks.%d.events" % i, ["events", "count"]),
                  ("ranks.%d.last_seq" % i, ["events", "last_seq"]), ("world", ["rank_state", "world"]),
                  ("calls_total", ["rank_state", "communication", "calls"]),
                  ("bytes_total", ["rank_state", "communication", "bytes_sent"])]
        for sub, ks in simple:
            out = variant(ctx, run, [(rel, "json", lambda d, ks=ks: set_path(d["predicate"], ks, other(get_path(d["predicate"], ks))))])
            expect_refused(ctx, "facts", "%s: %s" % (rel, ".".join(ks)), out, ["sources.agree", "trace.valid"], sub)
        def steps_up(d):  # a self-consistent receipt that counts one more step
            q = d["predicate"]
            q["steps"] += 1
            q["steps_exact"] += 1
            if "steps_by_objective" in q:
                q["steps_by_objective"]["grpo"] = q["steps_by_objective"].get("grpo", 0) + 1
        out = variant(ctx, run, [(rel, "json", steps_up)])
        expect_refused(ctx, "facts", "%s: steps (self-consistent)" % rel, out, ["sources.agree"], "ranks.%d.steps" % i)
        def to_sft(d):
            q = d["predicate"]["steps_by_objective"]
            q["sft"], q["grpo"] = q.get("grpo", 0), 0
        out = variant(ctx, run, [(rel, "json", to_sft)])
        expect_refused(ctx, "facts", "%s: steps_by_objective" % rel, out, ["sources.agree"], "steps_by_objective")
        for j, ph in enumerate(p["phases"]):
            for fld, sub in (("count", "phases"), ("wall_ns_total", "phase_wall_ns")):
                def ed(d, j=j, fld=fld):
                    d["predicate"]["phases"][j][fld] += 1
                out = variant(ctx, run, [(rel, "json", ed)])
                expect_refused(ctx, "facts", "%s: phases[%s].%s" % (rel, ph["phase"], fld), out, ["sources.agree"],
                               "ranks.%d.%s" % (i, sub))
        traced = set()
        for ln in read_trace(os.path.join(run, r, "events.jsonl.zst")):
            if '"collective"' in ln:
                traced.add(json.loads(ln)["purpose"])
        for j, bp in enumerate(p["rank_state"]["communication"]["by_purpose"]):
            if bp["purpose"] not in traced:
                continue  # a setup collective, issued before the trace opened: the receipt's word alone
            for fld, sub in (("calls", "calls"), ("bytes_sent", "bytes_sent")):
                if fld == "bytes_sent" and bp[fld] == 0:
                    continue
                def ed(d, j=j, fld=fld):
                    e = d["predicate"]["rank_state"]["communication"]
                    e["by_purpose"][j][fld] += 1
                    e["calls" if fld == "calls" else "bytes_sent"] += 1  # the total kept consistent
                out = variant(ctx, run, [(rel, "json", ed)])
                expect_refused(ctx, "facts", "%s: by_purpose[%s].%s" % (rel, bp["purpose"], fld), out,
                               ["sources.agree"], "ranks.%d.%s" % (i, sub))
        def dig(d):
            d["subject"][0]["digest"]["sha256"] = "0" * 64
        out = variant(ctx, run, [(rel, "json", dig)], resubject=False)
        expect_refused(ctx, "facts", "%s: subject digest" % rel, out, ["sources.agree", "receipts.agree"], "digests")
    # the shards: owned twice, owned by none
    if world > 1:
        def twice(d):
            d["predicate"]["rank_state"]["prompt_positions"][0] -= 1
        out = variant(ctx, run, [(ranks[1] + "/receipt.json", "json", twice)])
        expect_refused(ctx, "facts", "shards: a position owned twice", out, ["sources.agree"], "owned twice")
        def gap(d):
            d["predicate"]["rank_state"]["prompt_positions"][0] += 1
        out = variant(ctx, run, [(ranks[1] + "/receipt.json", "json", gap)])
        expect_refused(ctx, "facts", "shards: a position owned by none", out, ["sources.agree"], "owned by no rank")
        def same(d):
            d["predicate"]["rank_state"]["prompt_positions"] = list(recs[ranks[0]]["predicate"]["rank_state"]["prompt_positions"])
        out = variant(ctx, run, [(ranks[1] + "/receipt.json", "json", same)])
        expect_refused(ctx, "facts", "shards: two ranks claim one shard", out, ["sources.agree"], "shards")
    # each trace's account: its header, its step metrics, its end
    for i, r in enumerate(ranks):
        rel = r + "/events.jsonl.zst"
        for k in ("run_id", "world", "host", "rank"):
            out = variant(ctx, run, [(rel, "trace", lambda ls, k=k: ls[0].__setitem__(k, other(ls[0][k])))])
            expect_refused(ctx, "facts", "%s header: %s" % (rel, k), out, ["sources.agree", "trace.valid"], k)
        def sft(ls):
            for e in ls:
                if e.get("ev") == "step_metrics":
                    e["objective"] = "sft"
                    return
        out = variant(ctx, run, [(rel, "trace", sft)])
        expect_refused(ctx, "facts", "%s: step_metrics objective" % rel, out, ["sources.agree"], "objective")
        def done(ls):
            for e in ls:
                if e.get("ev") == "rank_complete":
                    e["steps"] += 1
        out = variant(ctx, run, [(rel, "trace", done)])
        expect_refused(ctx, "facts", "%s: rank_complete.steps" % rel, out, ["sources.agree"], "ranks.%d.steps" % i)


    # the trainer's metrics lines (--metrics) against rank 0's trace: each step's objective and every figure
    lines = [json.loads(x) for x in open(ctx.metrics) if x.strip()] if ctx.use_metrics else []
    # a metrics file that is not one: unusable input (exit 2) naming the file and the line, no verdict
    for label, text in (("a line that is not JSON", "{\"step\": 0,\n"), ("a step that is not an integer", '{"step": "x"}\n'),
                        ("a missing file", None)):
        if not ctx.use_metrics:
            break
        bad_path = os.path.join(ctx.t, "metrics.bad.jsonl")
        if os.path.exists(bad_path):
            os.unlink(bad_path)
        if text is not None:
            with open(bad_path, "w") as f:
                f.write(text)
        rc, doc, err = ctx.gate(run, metrics=bad_path)
        ctx.verdict("facts", "--metrics: " + label, rc == 2 and doc is None and bad_path in err and
                    (text is None or "line 1" in err), "exit %d, report %s: %s" % (rc, doc is not None, err.strip()),
                    counted=False)
    for li, ln in enumerate(lines):
        keys = ["objective"] + [k for k, v in ln.items() if isinstance(v, (int, float)) and k != "step"]
        for k in keys:
            edited = [dict(x) for x in lines]
            edited[li][k] = other(ln[k], k)
            path = os.path.join(ctx.t, "metrics.edited.jsonl")
            with open(path, "w") as f:
                f.writelines(json.dumps(x) + "\n" for x in edited)
            rc, doc, err = ctx.gate(run, metrics=path)
            fig = k != "objective" and k in FIGURES
            if k != "objective" and not fig:
                # a figure run.invariants does not read (lr, tokens_per_s, step_wall_s...): stated by the
                # metrics line alone; the gate's verdict must not change
                ctx.verdict("facts", "metrics line %d: %s (not a fact)" % (li, k), rc == 0,
                            "the gate failed on an uncompared field: exit %d" % rc, counted=False)
                continue
            name = "--metrics line %d: %s" % (li, k)
            if rc == 0:
                ctx.verdict("facts", name, False, "the gate passed")
            else:
                why = failed_naming(doc, "sources.agree", "steps.%d.%s" % (ln["step"], "objective" if k == "objective"
                                                                             else "figures"))
                ctx.verdict("facts", name, why == "", why)


# the step_metrics fields the description compares (run.invariants' figures: audit.h, ls_audit_sm_field)
FIGURES = {"reward_mean", "reward_std", "reward_min", "reward_max", "adv_mean", "adv_std", "loss", "loss_policy",
           "loss_kl", "kl_mean", "clip_fraction", "ratio_min", "ratio_mean", "ratio_max", "response_len_mean", "tokens"}


def gen_groups(ctx, run):
    """Every field of every trace header's group table edited."""
    world = json.load(open(os.path.join(run, "manifest.json")))["predicate"]["world"]
    for i in range(world):
        rel = "rank-%04d/events.jsonl.zst" % i
        groups = json.loads(read_trace(os.path.join(run, rel))[0])["groups"]
        for gi, g in enumerate(groups):
            n = g["name"]
            edits = [("a member outside the world", lambda m: m + [world]),
                     ("itself dropped", lambda m, i=i: [x for x in m if x != i]),
                     ("another rank dropped", lambda m, i=i: [x for x in m if x == i]),
                     ("members reversed", lambda m: list(reversed(m))),
                     ("a member repeated", lambda m: m + m[-1:]),
                     ("no members", lambda m: [])]
            for label, fn in edits:
                def ed(ls, gi=gi, fn=fn):
                    ls[0]["groups"][gi]["members"] = fn(ls[0]["groups"][gi]["members"])
                if fn(list(g["members"])) == g["members"]:
                    continue
                out = variant(ctx, run, [(rel, "trace", ed)])
                expect_refused(ctx, "groups", "%s: group %s, %s" % (rel, n, label), out,
                               ["sources.agree", "trace.valid", "collectives.match"], "")
            for label, fn in (("renamed", lambda ls, gi=gi: ls[0]["groups"][gi].__setitem__("name", n + "x")),
                              ("dropped", lambda ls, gi=gi: ls[0]["groups"].pop(gi))):
                out = variant(ctx, run, [(rel, "trace", fn)])
                expect_refused(ctx, "groups", "%s: group %s %s" % (rel, n, label), out,
                               ["sources.agree", "trace.valid", "collectives.match"], "")
        def extra(ls):
            ls[0]["groups"].append({"name": "dp", "members": list(range(world))})
        out = variant(ctx, run, [(rel, "trace", extra)])
        expect_refused(ctx, "groups", "%s: a group only this header lists" % rel, out, ["sources.agree"], "groups.dp")


def gen_sequence(ctx, run):
    """Every phase of every step of every rank moved, dropped and duplicated, phases swapped and nested, the
    optimizer moved before the backward, a layer event duplicated or moved out of its phase: each edit made
    by tests/audit/audit_sequence_edit.py (seq, counts, the receipts' totals and every digest fixed after it), the
    run signed again.  Refused by steps.sequence, or by rank.phases / rank.layers where a phase or layer
    event is missing."""
    edit = os.path.join(SRC, "tests", "audit", "audit_sequence_edit.py")
    world = json.load(open(os.path.join(run, "manifest.json")))["predicate"]["world"]
    rules = ["steps.sequence", "rank.phases", "rank.layers"]
    for rank in range(world):
        evs = [json.loads(x) for x in read_trace(os.path.join(run, "rank-%04d/events.jsonl.zst" % rank))
               if x.strip()][1:]
        steps = sorted({e["step"] for e in evs if e.get("ev") == "phase_begin"})
        for step in steps:
            phases = [e["phase"] for e in evs if e.get("ev") == "phase_begin" and e.get("step") == step]
            cases = [("move-optimizer",)]
            for ph in sorted(set(phases)):
                for n in range(1, phases.count(ph) + 1):
                    cases += [("dup-phase", ph, str(n)), ("drop-phase", ph, str(n))]
            for a_, b_ in zip(phases, phases[1:]):
                if a_ != b_:
                    cases += [("swap", a_, b_), ("nest", a_, b_)]
            layers = [e for e in evs if e.get("ev") == "layer_end" and e.get("step") == step]
            for le in layers[:: max(1, len(layers) // 6)]:  # a layer event of each part of the step
                a = (le["phase"], str(le["member"]), str(le["layer"]), le["dir"])
                cases += [("dup-layer",) + a, ("layer-out",) + a]
            for c in cases:
                out = os.path.join(ctx.t, "variant")
                shutil.rmtree(out, ignore_errors=True)
                shutil.copytree(run, out)
                for f in ("manifest.dsse.json", "parity.json", "parity.dsse.json"):
                    if os.path.exists(os.path.join(out, f)):
                        os.unlink(os.path.join(out, f))
                p = ctx.run([sys.executable, edit, out, str(rank), str(step)] + list(c), check=False)
                if p.returncode != 0:
                    ctx.skipped["sequence"] = ctx.skipped.get("sequence", 0) + 1
                    continue
                if ctx.run([ctx.sign, "sign", out, "--key", ctx.key], check=False).returncode != 0:
                    ctx.skipped["sequence"] = ctx.skipped.get("sequence", 0) + 1
                    continue
                for f in ("parity.json", "parity.dsse.json"):
                    shutil.copy(os.path.join(run, f), os.path.join(out, f))
                expect_refused(ctx, "sequence", "rank %d step %d: %s" % (rank, step, " ".join(c)), out, rules, "")


# ---- main ------------------------------------------------------------------------

CLASSES = {"swap": gen_swap, "facts": gen_facts, "groups": gen_groups, "sequence": gen_sequence}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("scratch", nargs="?")
    ap.add_argument("--class", dest="classes", action="append", choices=sorted(CLASSES))
    ap.add_argument("--audit", help="another longstraw-audit to judge the variants (an older build: what it lets through)")
    a = ap.parse_args()
    scratch = a.scratch or tempfile.mkdtemp(prefix="ls-generate.")
    os.makedirs(scratch, exist_ok=True)
    ctx = Ctx(os.path.abspath(a.build), os.path.abspath(scratch))
    if a.audit:
        ctx.audit = os.path.abspath(a.audit)
        ctx.use_metrics = False
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
        print("%-9s %5d variant(s), %5d refused by the right rule%s%s" %
              (cls, n, ok, ", %d control(s) held (a swap that met no signed read or an uncompared field kept the honest verdict; an unusable --metrics exits 2)" % ctl if ctl else "",
               ", %d edit(s) that could not be made or that no signer signs (schema-invalid) left out" % ctx.skipped[cls] if ctx.skipped.get(cls) else ""))
    for f in ctx.failures:
        print("FAIL " + f)
    return 1 if ctx.failures else 0


if __name__ == "__main__":
    sys.exit(main())
