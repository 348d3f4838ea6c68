"""What the torch_cp example's bug tables (fault_table.py, path_bugs.py) share: the repository and the
interpreter, their command line, a step run with its output to a log, the example's sources copied
outside the git tree, its initial weights, the rules an audit report fails, and the table written out.
"""
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = os.environ.get("LS_TORCH_PYTHON", "/usr/bin/python3")


def start(argv, doc):
    """BUILD_DIR OUT_DIR [--markdown FILE] from argv: (build, out, md), OUT_DIR made afresh; None after
    printing the usage (doc's last line) when they are missing (the caller exits 2)."""
    if len(argv) < 2:
        print(doc.strip().splitlines()[-1], file=sys.stderr)
        return None
    build, out = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    md = argv[argv.index("--markdown") + 1] if "--markdown" in argv else None
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    return build, out, md


def run(cmd, env, log, timeout=900):
    """cmd with stdout and stderr to the file log; its exit status."""
    with open(log, "w") as f:
        return subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode


def copy_sources(dst):
    """examples/torch_cp, python/longstraw_emit and profiles/torch-cp.json, laid out as in the tree."""
    ign = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in (("examples", "torch_cp"), ("python", "longstraw_emit")):
        shutil.copytree(os.path.join(ROOT, *part), os.path.join(dst, *part), ignore=ign)
    os.makedirs(os.path.join(dst, "profiles"))
    shutil.copy(os.path.join(ROOT, "profiles", "torch-cp.json"), os.path.join(dst, "profiles"))


def init_weights(tool, example, env, out):
    """The example's initial weights (train.py --mode init --seed 3) in out/init: that directory, or None
    after saying on stderr that the init failed."""
    init = os.path.join(out, "init")
    if run([PY, os.path.join(example, "train.py"), "--mode", "init", "--seed", "3", "--out", init], env,
           os.path.join(out, "init.log")) != 0:
        print(f"{tool}: the example's init failed", file=sys.stderr)
        return None
    return init


def failed_rules(report):
    """The rules an audit report (its JSON) fails: {rule id: the level it belongs to}."""
    failed = {}
    for lv in report["levels"]:
        for c in lv["checks"]:
            if c.get("verdict") == "fail":
                failed[c["id"]] = lv["level"]
    return failed


def finish(tool, lines, md, bad):
    """The table (markdown lines) printed and, with md, written there atomically; each of bad said on
    stderr after tool's name. Returns the exit status: 1 when anything is bad."""
    text = "\n".join(lines) + "\n"
    print(text)
    if md:
        with open(md + ".tmp", "w") as f:
            f.write(text)
        os.replace(md + ".tmp", md)
    for b in bad:
        print(f"{tool}: {b}", file=sys.stderr)
    return 1 if bad else 0
