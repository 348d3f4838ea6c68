#!/usr/bin/env python3
"""check_vocab.py - one vocabulary: the names and numbers the C code defines
(longstraw-train --list-names, longstraw-audit --list-names) against every
schema enum that spells them and the docs' tables that state them.

  check_vocab.py SRC_DIR TRAIN_EXE AUDIT_EXE [PARITY_EXE]
                                               check the tree (exit 1 on a difference)
  check_vocab.py --selftest SRC_DIR TRAIN_EXE AUDIT_EXE [PARITY_EXE]
                                               inject a difference into a copy of each
                                               source it reads and see it reported

Each difference is one line naming the file, the place in it and the name
or number that differs.  What is checked (docs/testing.md, "One vocabulary"):
  - rule ids: audit-report.schema.json's check id enum, and docs/audit.md's
    level table (each level row's ids), against the audit's rule list
    (audit/rules/rule_ids.c) with its levels;
  - layer_end kinds, the
    collective ops/reductions/dtypes of v1 and v2 traces, objectives, the
    phase names, group kinds of the trace headers and profiles, the
    communicator's backends (receipt schema), the receipt's option enums
    (grad_mode, strategy, ...) against the trainer's option values;
  - longstraw-parity's families and control faults, and the faults the
    audit reads a run's config for, are the trainer's;
  - faults: every `--fault NAME` in docs/*.md is one the trainer injects,
    every fault the trainer injects is in docs/train.md, and the docs'
    fault-level lists (docs/audit.md, docs/evidence.md) give each fault the
    level the trainer's profiles (profiles/hybrid.json, mla.json) give it;
  - the demonstration's fault tables (README.md, examples/torch_cp/README.md)
    against profiles/torch-cp.json: each fault the profile's, each level the
    profile's (or, where the table gives the level a run still proves, one less);
  - record sizes: docs/audit.md's and docs/contract.md's byte counts of the
    audit's records against their sizeof.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Trainer faults the v1 profiles do not list (audited at level 1, the rule
# for a fault a profile does not name).  Listing them in profiles/*.json
# changes the profiles' digests that the golden reports pin: a change of its
# own.  A fault leaves this list by being added to the profiles.
FAULTS_NOT_IN_PROFILES = {"ep-drop-dx", "stage-skip-page"}


def dump(exe, opt="--list-names"):
    out = subprocess.run([exe, opt], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"check_vocab: {exe} {opt}: exit {out.returncode}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def dump_train(exe):
    """longstraw-train's vocabulary, with each family's registry entry (--families: its profile's path, its CP
    faults) under "registry"."""
    names = dump(exe)
    names["registry"] = {f["name"]: f for f in dump(exe, "--families").get("families", [])}
    return names


def at(doc, path):
    for k in path.strip("/").split("/"):
        doc = doc[int(k)] if isinstance(doc, list) else doc[k]
    return doc


class Checker:
    def __init__(self, src, train, audit, parity=None):
        self.src, self.train, self.audit, self.parity, self.errors = src, train, audit, parity, []

    def err(self, msg):
        self.errors.append(msg)

    def read(self, rel):
        with open(os.path.join(self.src, rel), encoding="utf-8") as f:
            return f.read()

    def schema(self, rel):
        return json.loads(self.read(os.path.join("schemas", rel)))

    # -- schema enums ------------------------------------------------------------
    def enum_equal(self, rel, path, want, what):
        try:
            got = at(self.schema(rel), path)["enum"]
        except (KeyError, IndexError, ValueError) as e:
            self.err(f"schemas/{rel}: {path}: no enum ({e}) where {what} are spelled")
            return
        for n in sorted(set(got) - set(want)):
            self.err(f"schemas/{rel}: {path}: '{n}' is not one of the {what} ({', '.join(want)})")
        for n in [n for n in want if n not in got]:
            self.err(f"schemas/{rel}: {path}: the {what} '{n}' is missing")

    def enum_covers(self, rel, path, want, what):
        """The enum holds every name of want (it may spell more: names other producers write)."""
        try:
            got = at(self.schema(rel), path)["enum"]
        except (KeyError, IndexError, ValueError) as e:
            self.err(f"schemas/{rel}: {path}: no enum ({e}) where {what} are spelled")
            return
        for n in [n for n in want if n not in got]:
            self.err(f"schemas/{rel}: {path}: the {what} '{n}' is missing")

    def schemas(self):
        t, a = self.train, self.audit
        rules = [r["id"] for r in a["rule_ids"]]
        self.enum_equal("audit-report.schema.json", "$defs/check/properties/id", rules, "audit's rule ids")
        # families: no schema names them (family_schemas_check.py; the readers check a config by the registry)
        tr = a["trace"]
        for k in t["layer_kinds"]:
            if k not in tr["layer_kinds"]:
                self.err(f"trainer: layer kind '{k}' is not one of the trace's ({', '.join(tr['layer_kinds'])})")
        self.enum_equal("event-layer_end.schema.json", "properties/kind", tr["layer_kinds"], "layer_end kinds")
        for rel, path, key in [("event-collective.schema.json", "properties/op", "ops"),
                               ("event-collective.schema.json", "properties/red", "reds"),
                               ("event-collective.schema.json", "properties/dtype", "dtypes"),
                               ("event-v2.schema.json", "$defs/collective/properties/op", "ops_v2"),
                               ("event-v2.schema.json", "$defs/collective/properties/red", "reds_v2"),
                               ("event-v2.schema.json", "$defs/collective/properties/dtype", "dtypes_v2"),
                               ("event-layer_end.schema.json", "properties/dir", "dirs"),
                               ("event-v2.schema.json", "$defs/layer_end/properties/dir", "dirs"),
                               ("event-step_metrics.schema.json", "properties/objective", "objectives"),
                               ("event-v2.schema.json", "$defs/step_metrics/properties/objective", "objectives")]:
            self.enum_equal(rel, path, tr[key], f"trace's {key.replace('_v2', ' (v2)')}")
        # group kinds: the trainer's are among every enum that spells a group kind, and those enums agree
        kinds = at(self.schema("event-header-v2.schema.json"), "$defs/group/properties/kind")["enum"]
        for rel, path in [("event-header.schema.json", "$defs/group/properties/kind"),
                          ("event-header-v2.schema.json", "$defs/group/properties/kind"),
                          ("profile.schema.json", "$defs/group_kind")]:
            self.enum_covers(rel, path, t["group_kinds"], "trainer's group kinds")
            self.enum_equal(rel, path, kinds, "group kinds of the v2 trace header")
        self.enum_equal("receipt.schema.json",
                        "$defs/predicate/properties/rank_state/properties/communication/properties/backend",
                        t["backends"], "communicator's backends")
        # the receipt's record of an option's value spells the option's values (and may add its own,
        # such as task "none" for a rollouts file)
        ov = t["option_values"]
        for opt, path, exact in [("--grad-mode", "$defs/config/properties/grad_mode", True),
                                 ("--strategy", "$defs/config/properties/strategy", True),
                                 ("--train-mode", "$defs/config/properties/train_mode", True),
                                 ("--objective", "$defs/config/properties/objective", True),
                                 ("--dtype", "$defs/build/properties/dtype_builds/items", True),
                                 ("--lora-init", "$defs/config/properties/options/properties/lora_init", True),
                                 ("--keep-reference", "$defs/config/properties/options/properties/keep_reference", True),
                                 ("--replay-checkpoint",
                                  "$defs/config/properties/options/properties/replay_checkpoint", True),
                                 ("--state-tier", "$defs/config/properties/options/properties/state_tier", True),
                                 ("--task", "$defs/config/properties/options/properties/task", False)]:
            if opt not in ov:
                self.err(f"trainer: no option {opt} with fixed values (check_vocab.py names it)")
                continue
            (self.enum_equal if exact else self.enum_covers)("receipt.schema.json", path, ov[opt],
                                                             f"values of longstraw-train {opt}")
        self.enum_equal("event-gradient_probe.schema.json", "properties/grouping", ov.get("--probe-groups", []),
                        "values of longstraw-train --probe-groups")

    # -- docs ----------------------------------------------------------------------
    def audit_levels(self):
        """docs/audit.md's level table: | N | `id` (...), `id`, ... | (ids outside parentheses)."""
        text = self.read("docs/audit.md")
        want = {r["id"]: r["level"] for r in self.audit["rule_ids"]}
        seen = {}
        for line in text.splitlines():
            m = re.match(r"^\| ([0-9]) \| (.*)\|\s*$", line)
            if not m:
                continue
            depth, i, body = 0, 0, m.group(2)
            while i < len(body):
                c = body[i]
                if c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                elif c == "`":
                    j = body.find("`", i + 1)
                    if j < 0:
                        break
                    if depth == 0:
                        seen[body[i + 1:j]] = int(m.group(1))
                    i = j
                i += 1
        if not seen:
            self.err("docs/audit.md: no level table (| N | `rule.id` ... |) found")
            return
        for rid, lvl in sorted(seen.items()):
            if rid not in want:
                self.err(f"docs/audit.md: level table: '{rid}' (level {lvl}) is not one of the audit's rule ids")
            elif want[rid] != lvl:
                self.err(f"docs/audit.md: level table: '{rid}' is at level {lvl}, the audit's rule list says {want[rid]}")
        for rid in [r for r in want if r not in seen]:
            self.err(f"docs/audit.md: level table: the rule '{rid}' (level {want[rid]}) is missing")

    def fault_levels(self, rel, start, end):
        """The faults and levels a docs sentence lists: backticked names, each run of them ended by a
        level (a bare digit or 'level N'); text in parentheses is left out."""
        text = self.read(rel)
        i = text.find(start)
        if i < 0:
            self.err(f"{rel}: the fault-level list ('{start}') is not found")
            return {}
        j = text.find(end, i)
        span = text[i + len(start):j if j > 0 else None]
        span = re.sub(r"\([^()]*\)", "", span)
        out, pending = {}, []
        for m in re.finditer(r"`([a-z0-9-]+)`|\b([1-4])\b", span):
            if m.group(1):
                pending.append(m.group(1))
            else:
                for n in pending:
                    out[n] = int(m.group(2))
                pending = []
        return out

    def faults(self):
        faults = self.train["faults"]
        profiles = {}
        reg = self.train.get("registry", {})
        # a CP fault is one a family's registry entry lists (cp_faults): a family's profile may leave out
        # another family's CP fault (the audit then holds it at level 1, as any fault a profile does not name)
        cp_faults = {n for f in reg.values() for n in f.get("cp_faults", [])}
        for fam in self.train["families"]:
            rel = reg.get(fam, {}).get("files", {}).get("profile") or f"profiles/{fam}.json"
            own = set(reg.get(fam, {}).get("cp_faults", []))
            try:
                prof = json.loads(self.read(rel))
            except (OSError, ValueError) as e:
                self.err(f"{rel}: unreadable ({e})")
                continue
            got = {k: v.get("level") for k, v in prof.get("faults", {}).items()}
            for n in sorted(set(got) - set(faults)):
                self.err(f"{rel}: faults: '{n}' is not a fault longstraw-train injects ({', '.join(faults)})")
            for n in faults:
                if n not in got and n not in FAULTS_NOT_IN_PROFILES and not (n in cp_faults and n not in own):
                    self.err(f"{rel}: faults: the trainer's fault '{n}' is missing")
                elif n in got and n in FAULTS_NOT_IN_PROFILES:
                    self.err(f"tests/tools/check_vocab.py: FAULTS_NOT_IN_PROFILES: '{n}' is in {rel} now: drop it there")
            profiles[rel] = got
        levels = {}
        for got in profiles.values():
            for n, lvl in got.items():
                levels.setdefault(n, lvl)
        for rel, start, end in [("docs/audit.md", "the v1 profiles:", "a fault the profile does not list"),
                                ("docs/evidence.md", "caps every level it can\n  touch:", "an unknown name")]:
            listed = self.fault_levels(rel, start, end)
            for n, lvl in sorted(listed.items()):
                if n not in faults:
                    self.err(f"{rel}: fault list: '{n}' is not a fault longstraw-train injects")
                elif n in levels and levels[n] != lvl:
                    self.err(f"{rel}: fault list: '{n}' is at level {lvl}, the profiles say {levels[n]}")
            for n in sorted(levels):
                if n not in listed:
                    self.err(f"{rel}: fault list: the profiles' fault '{n}' (level {levels[n]}) is missing")
        docs = os.path.join(self.src, "docs")
        for name in sorted(os.listdir(docs)):
            if not name.endswith(".md"):
                continue
            rel = f"docs/{name}"
            for m in re.finditer(r"--fault[ =]`?([a-z][a-z0-9-]*)", self.read(rel)):
                if m.group(1) not in faults:
                    line = self.read(rel)[:m.start()].count("\n") + 1
                    self.err(f"{rel}:{line}: --fault {m.group(1)}: not a fault longstraw-train injects")
        train_md = self.read("docs/train.md")
        for n in faults:
            if f"`{n}" not in train_md and f"--fault {n}" not in train_md:
                self.err(f"docs/train.md: the trainer's fault '{n}' is not described")

    def fault_tables(self):
        """The fault tables of the demonstration's docs against its profile (profiles/torch-cp.json): each
        row's fault is the profile's, and the level column says the level the profile gives it ("breaks
        level") or the level a run with it still proves, one below ("level proven", README's "level")."""
        try:
            prof = json.loads(self.read("profiles/torch-cp.json"))
        except (OSError, ValueError) as e:
            self.err(f"profiles/torch-cp.json: unreadable ({e})")
            return
        levels = {k: v.get("level") for k, v in prof.get("faults", {}).items()}
        for rel, header, column, offset in [
                ("README.md", "| bug | reproduces | level | named by |", "level", -1),
                ("examples/torch_cp/README.md", "| fault | what it does | breaks (measured) | caught by | breaks level |",
                 "breaks level", 0),
                ("examples/torch_cp/README.md", "| bug | level proven | the rules that name it | parity exit |",
                 "level proven", -1)]:
            lines = self.read(rel).splitlines()
            try:
                start = lines.index(header)
            except ValueError:
                self.err(f"{rel}: the fault table '{header}' is not found")
                continue
            col = [c.strip() for c in header.strip("|").split("|")].index(column)
            rows = 0
            for n, line in enumerate(lines[start + 2:], start + 3):
                if not line.startswith("|"):
                    break
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                m = re.match(r"`([a-z0-9-]+)`", cells[0])
                if not m:
                    continue
                name, rows = m.group(1), rows + 1
                if name not in levels:
                    self.err(f"{rel}:{n}: '{name}' is not a fault of profiles/torch-cp.json")
                    continue
                want = levels[name] + offset
                if col >= len(cells) or cells[col] != str(want):
                    got = cells[col] if col < len(cells) else "(none)"
                    self.err(f"{rel}:{n}: '{name}': {column} {got}, the profile's level {levels[name]} says {want}")
            if not rows:
                self.err(f"{rel}: the fault table '{header}' has no fault rows")

    def record_sizes(self):
        sz = self.audit["record_sizes"]
        for rel, pattern, key in [
                ("docs/audit.md", r"keeps every\s+group collective's record, (\d+) bytes", "flight_recorder"),
                ("docs/audit.md", r"\((\d+) bytes a key", "layer_key"),
                ("docs/audit.md", r"What stays per step is (\d+) bytes a rank", "step"),
                ("docs/audit.md", r"point-to-point\s+messages[^.]*?kept apart,\s+(\d+) bytes each", "p2p"),
                ("docs/contract.md", r"(\d+)-byte record keeps", "flight_recorder"),
                ("docs/design.md", r"collective record[^.]*?(\d+) bytes", "flight_recorder")]:
            text = self.read(rel)
            found = list(re.finditer(pattern, text))
            if not found and rel != "docs/design.md":
                self.err(f"{rel}: the size of the {key} record ('{pattern}') is not found")
            for m in found:
                line = text[:m.start()].count("\n") + 1
                if int(m.group(1)) != sz[key]:
                    self.err(f"{rel}:{line}: the {key} record is {m.group(1)} bytes there, "
                             f"sizeof says {sz[key]} (longstraw-audit --list-names)")

    def audit_faults(self):
        """The trainer faults the audit reads a run's config for are the trainer's."""
        for n in self.audit.get("faults_read", []):
            if n not in self.train["faults"]:
                self.err(f"longstraw-audit --list-names: faults_read: '{n}' is not a fault longstraw-train injects")

    def parity_names(self):
        """longstraw-parity's families and the faults its controls inject are the trainer's."""
        if self.parity is None:
            return
        if self.parity["families"] != self.train["families"]:
            self.err(f"longstraw-parity --list-names: families {self.parity['families']}, "
                     f"longstraw-train's {self.train['families']}")
        for n in self.parity["faults"]:
            if n not in self.train["faults"]:
                self.err(f"longstraw-parity --list-names: the control fault '{n}' is not a fault longstraw-train injects")

    def run(self):
        self.parity_names()
        self.audit_faults()
        self.schemas()
        self.audit_levels()
        self.faults()
        self.fault_tables()
        self.record_sizes()
        return self.errors


def check(src, train, audit, parity=None):
    errs = Checker(src, train, audit, parity).run()
    for e in errs:
        print(f"check_vocab: {e}")
    return errs


def selftest(src, train, audit, parity=None):
    """Copies the sources check_vocab reads, injects one difference at a time and sees it reported."""
    cases = [
        ("schemas/audit-report.schema.json", '"parity.loss"', '"parity.loss", "parity.injected"',
         "'parity.injected' is not one of the audit's rule ids"),
        ("schemas/event-v2.schema.json", '"bf16",', '',
         "the trace's dtypes (v2) 'bf16' is missing"),
        ("schemas/profile.schema.json", '"world", "dp", "cp", "tp", "pp", "ep"', '"world", "dp", "tp", "pp", "ep"',
         "the trainer's group kinds 'cp' is missing"),
        ("docs/audit.md", "`parity.fd_grad`, ", "",
         "the rule 'parity.fd_grad' (level 4) is missing"),
        ("docs/audit.md", "| 4 | `config.full_mode`", "| 3 | `config.full_mode`",
         "'config.full_mode' is at level 3"),
        ("docs/audit.md", "record, 56 bytes", "record, 48 bytes", "the flight_recorder record is 48 bytes"),
        ("docs/evidence.md", "`cp-local-dsa` level 2", "`cp-local-dsa` level 3",
         "'cp-local-dsa' is at level 3, the profiles say 2"),
        ("docs/train.md", "`--fault nan-grad`", "`--fault nan-grads`", "--fault nan-grads: not a fault"),
        ("README.md", "| QwenLM/FlashQLA PR #28 | 3 |", "| QwenLM/FlashQLA PR #28 | 4 |",
         "'decay-grad': level 4, the profile's level 4 says 3"),
        ("examples/torch_cp/README.md", "| parity `cp_grad` | 3 |", "| parity `cp_grad` | 2 |",
         "'loss-cp-scale': breaks level 2"),
    ]
    fails = 0
    base = check(src, train, audit, parity)
    if base:
        print("check_vocab --selftest: the tree itself differs (above); the self-test needs a clean tree")
        return 1
    for rel, old, new, expect in cases:
        with tempfile.TemporaryDirectory() as tmp:
            for d in ("schemas", "docs", "profiles", "examples/torch_cp"):
                shutil.copytree(os.path.join(src, d), os.path.join(tmp, d), ignore=shutil.ignore_patterns("*.py", "__pycache__"))
            shutil.copy(os.path.join(src, "README.md"), os.path.join(tmp, "README.md"))
            path = os.path.join(tmp, rel)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if old not in text:
                print(f"check_vocab --selftest: {rel}: the text to change ({old!r}) is gone: update the case")
                fails += 1
                continue
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.replace(old, new, 1))
            errs = Checker(tmp, train, audit).run()
            hit = [e for e in errs if expect in e and e.startswith(rel.split(":")[0])]
            if hit:
                print(f"ok: {hit[0]}")
            else:
                print(f"FAIL: {rel}: {old!r} -> {new!r} not reported as '{expect}' (got: {errs})")
                fails += 1
    # a name the C code adds that no schema spells
    t2 = json.loads(json.dumps(train))
    t2["backends"].append("nccl")
    errs = Checker(src, t2, audit).run()
    if any("'nccl' is missing" in e for e in errs):
        print("ok: a backend only the C code names is reported")
    else:
        print(f"FAIL: a new backend was not reported (got: {errs})")
        fails += 1
    n_cases = len(cases) + 2
    a2 = json.loads(json.dumps(audit))
    a2["faults_read"].append("skip-dkv-reduced")
    errs = Checker(src, train, a2, parity).run()
    if any("'skip-dkv-reduced' is not a fault longstraw-train injects" in e for e in errs):
        print("ok: a fault the audit reads that the trainer lacks is reported")
    else:
        print(f"FAIL: a fault the audit reads that the trainer lacks was not reported (got: {errs})")
        fails += 1
    if parity is not None:  # a control fault the trainer does not inject
        n_cases += 1
        p2 = json.loads(json.dumps(parity))
        p2["faults"].append("skip-the-reduce")
        errs = Checker(src, train, audit, p2).run()
        if any("'skip-the-reduce' is not a fault longstraw-train injects" in e for e in errs):
            print("ok: a parity control fault the trainer lacks is reported")
        else:
            print(f"FAIL: a parity control fault the trainer lacks was not reported (got: {errs})")
            fails += 1
    print(f"check_vocab --selftest: {n_cases - fails} of {n_cases} injected differences reported")
    return 1 if fails else 0


def main(argv):
    args = argv[1:]
    self_test = bool(args) and args[0] == "--selftest"
    if self_test:
        args = args[1:]
    if len(args) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    src, train, audit = args[0], dump_train(args[1]), dump(args[2])
    parity = dump(args[3]) if len(args) == 4 else None
    if self_test:
        return selftest(src, train, audit, parity)
    errs = check(src, train, audit, parity)
    if not errs:
        print(f"check_vocab: {len(train['faults'])} faults, {len(audit['rule_ids'])} rule ids, "
              f"{len(train['families'])} families, record sizes {audit['record_sizes']}"
              f"{', the parity controls' if parity else ''}: the schemas and docs agree with the code")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
