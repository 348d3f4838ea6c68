#!/usr/bin/env python3
"""check_layers.py - the source tree's layering, checked against what its
folders' READMEs state.

  tests/tools/check_layers.py [ROOT]          check; exit 1 naming every violation
  tests/tools/check_layers.py --order [ROOT]  print the folders in dependency order
  tests/tools/check_layers.py --selftest      each violation injected into a small
                                        tree of its own, and seen

A folder is a directory of a library top (common, kernels, receipts, audit,
parity, trainer) at any depth that holds sources itself (receipts/format,
trainer/base, kernels/cpu), or a directory under tests/ at any depth that
holds code (tests/audit, tests/fuzz; the files at the top of tests/ may
include anything).  A directory above folders that holds no source itself is
a group (trainer/, receipts/ split into layers).  Every folder has a
README.md with one line

    May include: trainer/model, trainer/base, kernels, receipts, common

naming the folders or groups its sources may include from ("nothing" for
none; a group named allows every folder under it).  A group's README may
state the line too: it then bounds what its folders include from outside the
group.  The
check fails on:
  - a folder without that line, or a line naming a folder that is not one;
  - an `#include "DIR/..."` of a folder the including folder's line does not
    name, or that leaves a group whose line does not name it (bench/ and the
    top of tests/ may include anything);
  - a circle between folders, or between the units of one folder (a unit is
    x.c with x.h and x_internal.h; unit a -> unit b when a's files include b.h);
  - two headers with one basename anywhere in the tree;
  - a reference to the design documents outside the repository.
"""
import os
import re
import sys

LIBS_TOP = ["common", "kernels", "receipts", "audit", "parity", "trainer"]
TESTS_TOP = "tests"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SKIP_DIRS = {"build", ".git", "fixtures", "corpus", "data", "__pycache__"}
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
# a tests/ folder is code when it holds any of these (its C includes are checked; a Python or shell
# folder states "May include: nothing" for C)
TEST_CODE_EXT = SOURCE_EXT + (".py", ".sh", ".cmake")


def subdirs(root, rel):
    path = os.path.join(root, rel)
    return sorted(d for d in os.listdir(path)
                  if os.path.isdir(os.path.join(path, d)) and d not in SKIP_DIRS and not d.startswith(".")
                  and not is_build_tree(os.path.join(path, d)))


def holds(root, rel, exts):
    path = os.path.join(root, rel)
    return any(f.endswith(exts) and os.path.isfile(os.path.join(path, f)) for f in os.listdir(path))


def library_folders(root):
    """(folders, groups): a folder is a directory of a library top (common, kernels, receipts, audit,
    parity, trainer, at any depth) that holds sources itself, or a directory under tests/ (at any
    depth) that holds code; a group is a directory above folders that holds none itself (trainer/,
    receipts/ once it is split into layers).  tests/ itself is neither: its top may include anything."""
    folders, groups = [], []

    def walk(rel, exts, top_is_test):
        if is_build_tree(os.path.join(root, rel)):
            return
        kids = subdirs(root, rel)
        if not top_is_test:
            if holds(root, rel, exts):
                folders.append(rel)
            elif kids:
                groups.append(rel)
        for k in kids:
            walk(rel + "/" + k, exts, False)

    for top in LIBS_TOP:
        if os.path.isdir(os.path.join(root, top)):
            walk(top, SOURCE_EXT, False)
    if os.path.isdir(os.path.join(root, TESTS_TOP)):
        walk(TESTS_TOP, TEST_CODE_EXT, True)
    return folders, groups


def folder_of(path, libs):
    """The folder a repository path belongs to (longest prefix), or None."""
    best = None
    for lib in libs:
        if path == lib or path.startswith(lib + "/"):
            if best is None or len(lib) > len(best):
                best = lib
    return best


def covers(names, target):
    """A May include line naming X allows X and every folder under X (a group names its folders)."""
    return any(target == n or target.startswith(n + "/") for n in names)


def may_include(root, lib, known, errors, required=True):
    """The names of lib's May include line; None when lib has no README line (and need not)."""
    readme = os.path.join(root, lib, "README.md")
    if not os.path.isfile(readme):
        if required:
            errors.append(f"{lib}/README.md: missing (every folder states what it may include)")
            return set()
        return None
    m = re.search(r"^May include:\s*(.*)$", open(readme, encoding="utf-8").read(), re.M)
    if not m:
        if required:
            errors.append(f"{lib}/README.md: no 'May include:' line")
            return set()
        return None
    line = re.sub(r"\s*\(.*\)\s*$", "", m.group(1))  # a trailing remark in parentheses
    names = [n.strip().strip("`") for n in line.split(",") if n.strip()]
    if names == ["nothing"]:
        return set()
    for n in names:
        if n not in known:
            errors.append(f"{lib}/README.md: 'May include:' names '{n}', which is not a library folder")
    return set(names)


def is_build_tree(path):
    """A CMake build directory (generated headers, not sources), wherever it lies."""
    return os.path.isfile(os.path.join(path, "CMakeCache.txt")) or os.path.isdir(os.path.join(path, "CMakeFiles"))


def sources(root, top):
    if is_build_tree(os.path.join(root, top)):
        return
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not is_build_tree(os.path.join(dirpath, d)))
        for f in sorted(filenames):
            if f.endswith((".c", ".h", ".cu", ".cuh")):
                yield os.path.relpath(os.path.join(dirpath, f), root)


def unit_of(path):
    """x.c, x.h and x_internal.h are one unit (an internal header is its unit's own)."""
    stem = os.path.splitext(path)[0]
    return stem[: -len("_internal")] if stem.endswith("_internal") else stem


def cycles(graph):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def topo_order(graph):
    """Folders bottom-up: each after everything it includes."""
    done, order = set(), []

    def visit(v):
        if v in done:
            return
        done.add(v)
        for w in sorted(graph.get(v, ())):
            visit(w)
        order.append(v)

    for v in sorted(graph):
        visit(v)
    return order


def check(root):
    errors = []
    libs, groups = library_folders(root)
    known = set(libs) | set(groups)
    allowed = {lib: may_include(root, lib, known, errors) for lib in libs}
    group_allowed = {g: may_include(root, g, known, errors, required=False) for g in groups}
    folder_graph = {lib: set() for lib in libs}
    unit_graph = {}
    headers = {}
    every = []
    for top in sorted(os.listdir(root)):
        if top in SKIP_DIRS or top.startswith(".") or not os.path.isdir(os.path.join(root, top)):
            continue
        every += list(sources(root, top))
    for path in every:
        base = os.path.basename(path)
        if base.endswith((".h", ".cuh")):
            headers.setdefault(base, []).append(path)
        lib = folder_of(path, libs)
        text = open(os.path.join(root, path), encoding="utf-8", errors="replace").read()
        unit = unit_of(path)
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            if not os.path.isfile(os.path.join(root, inc)):
                continue  # same-folder or generated includes
            target = folder_of(inc, libs)
            line = text.count("\n", 0, m.start()) + 1
            if lib and target and target != lib:
                folder_graph[lib].add(target)
                if not covers(allowed[lib], target):
                    errors.append(f"{path}:{line}: includes {inc} ({target}), which {lib}/README.md "
                                  f"does not allow (May include: {', '.join(sorted(allowed[lib])) or 'nothing'})")
                for g in groups:
                    # a group's line bounds what its folders include from outside it
                    if group_allowed[g] is not None and lib.startswith(g + "/") and not target.startswith(g + "/") \
                            and not covers(group_allowed[g], target):
                        errors.append(f"{path}:{line}: includes {inc} ({target}), outside what the group "
                                      f"{g}/README.md allows (May include: "
                                      f"{', '.join(sorted(group_allowed[g])) or 'nothing'})")
            if lib and target == lib:
                tunit = unit_of(inc)
                if tunit != unit:
                    unit_graph.setdefault(unit, set()).add(tunit)
    for comp in cycles(folder_graph):
        errors.append("a circle between folders: " + " -> ".join(comp + comp[:1]))
    for comp in cycles(unit_graph):
        errors.append("a circle between units: " + " -> ".join(comp + comp[:1]))
    for base, paths in sorted(headers.items()):
        if len(paths) > 1:
            errors.append(f"two headers named {base}: {', '.join(sorted(paths))}")
    outside = re.compile(r"\.\./shared/|(?<![\w/])(DESIGN|MODEL|STYLE)\.md")
    for path in every:
        text = open(os.path.join(root, path), encoding="utf-8", errors="replace").read()
        m = outside.search(text)
        if m:
            line = text.count("\n", 0, m.start()) + 1
            errors.append(f"{path}:{line}: '{m.group(0)}': the design documents are docs/design.md, "
                          f"docs/model.md and docs/style.md")
    return errors, folder_graph


def selftest():
    """Each kind of violation, injected into a clean synthetic tree, is seen."""
    import tempfile

    def tree(root, extra):
        files = {
            "common/README.md": "May include: nothing\n",
            "common/status.h": "",
            "kernels/README.md": "May include: common\n",
            "kernels/k.h": '#include "common/status.h"\n',
            "kernels/k.c": '#include "kernels/k.h"\n',
            "trainer/low/README.md": "May include: kernels, common\n",
            "trainer/low/a.h": '#include "kernels/k.h"\n',
            "trainer/low/a.c": '#include "trainer/low/a.h"\n',
            "trainer/low/b.h": '#include "trainer/low/a.h"\n',
            "trainer/low/b.c": '#include "trainer/low/b.h"\n',
            "trainer/high/README.md": "May include: trainer/low, common\n",
            "trainer/high/c.c": '#include "trainer/low/b.h"\n',
        }
        files.update(extra)
        for rel, text in files.items():
            if text is None:
                continue
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            open(os.path.join(root, rel), "w").write(text)

    cases = [
        ("clean", {}, None),
        ("an include against the direction", {"trainer/low/a.c": '#include "trainer/high/d.h"\n',
                                              "trainer/high/d.h": ""}, "does not allow"),
        ("a folder not in May include", {"trainer/high/c.c": '#include "kernels/k.h"\n'}, "does not allow"),
        ("a circle between folders", {"trainer/low/README.md": "May include: trainer/high, kernels, common\n",
                                      "trainer/high/d.h": "",
                                      "trainer/low/a.c": '#include "trainer/high/d.h"\n'}, "circle between folders"),
        ("a circle between units", {"trainer/low/a.c": '#include "trainer/low/b.h"\n'}, "circle between units"),
        ("two headers with one basename", {"trainer/high/a.h": ""}, "two headers named a.h"),
        ("a README without its line", {"trainer/high/README.md": "nothing stated\n"}, "no 'May include:' line"),
        ("a README naming no folder", {"trainer/high/README.md": "May include: trainer/nowhere\n"},
         "not a library folder"),
        ("build trees are not sources", {"build-x/CMakeCache.txt": "", "build-x/gen/a.h": "",
                                         "out/m/CMakeFiles/x": "", "out/m/gen/b.h": ""}, None),
        ("nested folders: a circle between two layers of one library",
         {"receipts/README.md": "May include: common\n",
          "receipts/low/README.md": "May include: receipts/high, common\n", "receipts/low/x.h": "",
          "receipts/low/x.c": '#include "receipts/high/y.h"\n',
          "receipts/high/README.md": "May include: receipts/low, common\n", "receipts/high/y.h": "",
          "receipts/high/y.c": '#include "receipts/low/x.h"\n'}, "circle between folders"),
        ("nested folders: a layer without its README",
         {"receipts/low/x.h": '#include "common/status.h"\n'}, "receipts/low/README.md: missing"),
        ("nested folders: a group's line bounds its layers",
         {"receipts/README.md": "May include: common\n",
          "receipts/low/README.md": "May include: kernels, common\n",
          "receipts/low/x.c": '#include "kernels/k.h"\n'}, "outside what the group receipts/README.md allows"),
        ("nested folders: a group named in a line allows its layers",
         {"receipts/README.md": "May include: common\n",
          "receipts/low/README.md": "May include: common\n", "receipts/low/x.h": "",
          "trainer/high/README.md": "May include: trainer/low, receipts, common\n",
          "trainer/high/c.c": '#include "receipts/low/x.h"\n'}, None),
        ("a tests/ folder includes what its line allows",
         {"tests/top.c": '#include "trainer/high/d.h"\n', "trainer/high/d.h": "",
          "tests/area/README.md": "May include: kernels\n",
          "tests/area/t.c": '#include "trainer/low/a.h"\n'}, "tests/area/README.md does not allow"),
        ("a tests/ folder without its README", {"tests/area/t.py": ""}, "tests/area/README.md: missing"),
        ("a reference outside the repository", {"trainer/low/a.c": "/* see ../shared/DESIGN.md */\n"},
         "design documents"),
    ]
    failed = 0
    for name, extra, want in cases:
        with tempfile.TemporaryDirectory() as root:
            tree(root, extra)
            errors, _ = check(root)
            seen = any(want in e for e in errors) if want else not errors
            if not seen:
                failed += 1
                print(f"check_layers --selftest: {name}: {'not seen' if want else errors}", file=sys.stderr)
    print(f"check_layers --selftest: {len(cases) - failed}/{len(cases)} cases as expected")
    return 1 if failed else 0


def default_root():
    """The repository this script lies in (the nearest folder above it with docs/design.md)."""
    here = os.path.dirname(os.path.abspath(__file__))
    while not os.path.isfile(os.path.join(here, "docs", "design.md")) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    return here


def main(argv):
    if "--selftest" in argv:
        return selftest()
    order = "--order" in argv
    args = [a for a in argv if a != "--order"]
    root = os.path.abspath(args[0]) if args else default_root()
    errors, graph = check(root)
    if order:
        for lib in topo_order(graph):
            print(f"{lib}: {', '.join(sorted(graph[lib])) or '-'}")
    for e in errors:
        print("check_layers: " + e, file=sys.stderr)
    if errors:
        return 1
    if not order:
        print(f"check_layers: {len(graph)} folders, every include runs down, no circle")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
