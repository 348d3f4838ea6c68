#!/usr/bin/python3
"""The example outputs of a document, produced by the built binaries.

Every fenced block (a line of three backticks, optionally with a language)
whose first line is `$ longstraw-plan ARGS` holds a command and its output:
the command may continue over lines ending in a backslash; the lines after
it are what the command prints on stdout.  This script runs each command from
the repository root with the built executable (BUILD/trainer/longstraw-plan)
and compares.  A block whose last line is `...` holds only the beginning of
the output: its lines must be the first lines of what the command prints.

Default: check.  Prints each block that differs with its differing lines
(document line, expected, got) and exits 1; 0 when every block agrees.
--update: rewrites the blocks' outputs in place (a `...` block keeps its
length and its `...`) and exits 0.  Exit 2: bad usage, a missing executable,
or a command that exits other than 0 or 1 (1 is longstraw-plan's "does not
fit": the plan is still printed).  Trailing spaces are not compared.
Standard library only.

usage: doc_examples.py --build DIR [--update] [DOC ...]   (default DOC: docs/plan.md)
"""
import argparse
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "$ "
EXES = {"longstraw-plan": os.path.join("trainer", "longstraw-plan")}
MORE = "..."


class Block:
    def __init__(self, start, cmd_lines, out_lines):
        self.start = start          # index of the first line inside the fence (the `$` line)
        self.cmd_lines = cmd_lines  # the command as written (with its continuation lines)
        self.out_lines = out_lines  # the expected output (with a final `...` when a prefix)

    @property
    def prefix(self):
        return bool(self.out_lines) and self.out_lines[-1].strip() == MORE

    def argv(self):
        text = "\n".join(self.cmd_lines)[len(PROMPT):].replace("\\\n", " ")
        return shlex.split(text)


def find_blocks(lines, where):
    """The example blocks of a document given as a list of lines (without newlines)."""
    blocks, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if j == len(lines):
            raise ValueError("%s:%d: a fenced block that does not end" % (where, i + 1))
        body = lines[i + 1:j]
        if body and body[0].startswith(PROMPT) and body[0][len(PROMPT):].split(" ", 1)[0] in EXES:
            k = 0
            while body[k].endswith("\\"):
                k += 1
                if k == len(body):
                    raise ValueError("%s:%d: a command continued past its block" % (where, i + 2))
            blocks.append(Block(i + 1, body[:k + 1], body[k + 1:]))
        i = j + 1
    return blocks


def run(build, block, where):
    argv = block.argv()
    exe = os.path.join(build, EXES[argv[0]])
    if not os.access(exe, os.X_OK):
        raise RuntimeError("%s: no executable %s (build the target %s)" % (where, exe, argv[0]))
    p = subprocess.run([exe] + argv[1:], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=dict(os.environ, LC_ALL="C"))
    if p.returncode not in (0, 1):
        raise RuntimeError("%s: `%s` exited %d: %s" % (where, " ".join(argv), p.returncode, p.stderr.strip()))
    return p.stdout.rstrip("\n").split("\n")


def check_doc(build, path, update):
    rel = os.path.relpath(path, ROOT)
    with open(path) as f:
        text = f.read()
    lines = text.split("\n")
    blocks = find_blocks(lines, rel)
    if not blocks:
        raise RuntimeError("%s: no block starts with `$ longstraw-plan` (nothing to check)" % rel)
    bad = 0
    for b in reversed(blocks):  # bottom up, so that a rewrite keeps the earlier blocks' line numbers
        where = "%s:%d" % (rel, b.start + 1)
        got = run(build, b, where)
        want = b.out_lines[:-1] if b.prefix else b.out_lines
        if b.prefix:
            got = got[:len(want)]
        diffs = []
        for n in range(max(len(want), len(got))):
            w = want[n].rstrip() if n < len(want) else None
            g = got[n].rstrip() if n < len(got) else None
            if w != g:
                diffs.append((b.start + len(b.cmd_lines) + n + 1, w, g))
        if not diffs:
            continue
        if update:
            new = [g.rstrip() for g in got] + ([MORE] if b.prefix else [])
            first = b.start + len(b.cmd_lines)
            lines[first:first + len(b.out_lines)] = new
            print("%s: updated (%d line(s) differed)" % (where, len(diffs)))
            continue
        bad += 1
        print("%s: `%s` prints other than the document says:" % (where, b.cmd_lines[0][len(PROMPT):]))
        for ln, w, g in diffs:
            print("  %s:%d" % (rel, ln))
            print("    document: %s" % ("(no line)" if w is None else w))
            print("    binary:   %s" % ("(no line)" if g is None else g))
    if update:
        new_text = "\n".join(lines)
        if new_text != text:
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                f.write(new_text)
            os.replace(tmp, path)
    return len(blocks), bad


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="the build directory (holding trainer/longstraw-plan)")
    ap.add_argument("--update", action="store_true", help="rewrite the blocks' outputs instead of checking")
    ap.add_argument("docs", nargs="*", default=[os.path.join(ROOT, "docs", "plan.md")])
    try:
        a = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    total = failed = 0
    try:
        for d in a.docs:
            n, bad = check_doc(os.path.abspath(a.build), os.path.abspath(d), a.update)
            total += n
            failed += bad
    except (OSError, ValueError, RuntimeError) as e:
        print("doc_examples: %s" % e, file=sys.stderr)
        return 2
    print("doc_examples: %d block(s), %d differ%s" % (total, failed, " (run with --update to rewrite them)"
                                                       if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
