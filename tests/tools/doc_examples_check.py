#!/usr/bin/python3
"""scripts/doc_examples.py against a stub longstraw-plan (ctest docs_examples_script).

The stub prints its arguments and two fixed lines, and exits with the status
its first argument names ("exit=N").  Checked: a document that agrees passes
(exit 0), with a continued command line joined into one argv; a differing line
fails (exit 1) naming the document's line, what it says and what the binary
prints; a block ending with `...` compares the beginning only, and fails when
the beginning differs or the output is shorter; --update rewrites the outputs
(a `...` block keeping its length) after which the check passes; a command
that exits 2, a missing executable and a document without example blocks exit
2.  Standard library only; exits 1 on the first failed check.
"""
import os
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "doc_examples.py")

STUB = """#!/bin/sh
echo "args: $*"
echo "line two"
echo "line three"
case "$1" in exit=*) exit "${1#exit=}" ;; esac
exit 0
"""

GOOD = """# doc

Text.

```
$ longstraw-plan exit=0 --a 1 \\
    --b 2
args: exit=0 --a 1 --b 2
line two
line three
```

```
# not an example: not checked
longstraw-plan --anything
```

```
$ longstraw-plan exit=1 --c
args: exit=1 --c
...
```
"""


def check(cond, what, out=""):
    if not cond:
        print("FAIL: %s\n%s" % (what, out))
        sys.exit(1)
    print("ok: %s" % what)


def run(build, doc, *extra):
    p = subprocess.run([sys.executable, SCRIPT, "--build", build, *extra, doc], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def main():
    with tempfile.TemporaryDirectory(prefix="ls-doc-examples-") as tmp:
        build = os.path.join(tmp, "build")
        os.makedirs(os.path.join(build, "trainer"))
        exe = os.path.join(build, "trainer", "longstraw-plan")
        with open(exe, "w") as f:
            f.write(STUB)
        os.chmod(exe, os.stat(exe).st_mode | stat.S_IXUSR)
        doc = os.path.join(tmp, "doc.md")

        def write(text):
            with open(doc, "w") as f:
                f.write(text)

        write(GOOD)
        rc, out = run(build, doc)
        check(rc == 0 and "2 block(s), 0 differ" in out, "an agreeing document passes, continued lines joined", out)

        write(GOOD.replace("line two\nline three\n```", "line two\nline 3\n```", 1))
        rc, out = run(build, doc)
        check(rc == 1 and "doc.md:10" in out and "document: line 3" in out and "binary:   line three" in out,
              "a differing line fails, named with its document line and both texts", out)

        write(GOOD.replace("args: exit=1 --c\n...", "args: exit=1 --d\n...", 1))
        rc, out = run(build, doc)
        check(rc == 1 and "document: args: exit=1 --d" in out, "a '...' block's beginning is compared", out)

        write(GOOD.replace("args: exit=1 --c\n...", "args: exit=1 --c\nline two\nline three\nline four\n...", 1))
        rc, out = run(build, doc)
        check(rc == 1 and "binary:   (no line)" in out, "a '...' block longer than the output fails", out)

        stale = GOOD.replace("line two\nline three\n```", "old\n```", 1).replace(
            "args: exit=1 --c\n...", "x\n...", 1)
        write(stale)
        rc, out = run(build, doc, "--update")
        check(rc == 0, "--update exits 0", out)
        with open(doc) as f:
            check(f.read() == GOOD, "--update rewrites the outputs ('...' blocks keep their length)")
        rc, out = run(build, doc)
        check(rc == 0, "the updated document passes", out)

        write(GOOD.replace("$ longstraw-plan exit=1 --c", "$ longstraw-plan exit=2 --c", 1))
        rc, out = run(build, doc)
        check(rc == 2 and "exited 2" in out, "a command that exits 2 is an error", out)

        rc, out = run(os.path.join(tmp, "nobuild"), doc)
        check(rc == 2 and "no executable" in out, "a missing executable is an error", out)

        write("# nothing here\n\n```\nlongstraw-plan --x\n```\n")
        rc, out = run(build, doc)
        check(rc == 2 and "no block" in out, "a document without example blocks is an error", out)

        write("```\n$ longstraw-plan --x\n")
        rc, out = run(build, doc)
        check(rc == 2 and "does not end" in out, "an unterminated block is an error", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
