#!/usr/bin/env python3
"""check_layers.py - the source tree's layering, checked against what its
folders' READMEs state.

  tests/check_layers.py [ROOT]          check; exit 1 naming every violation
  tests/check_layers.py --order [ROOT]  print the folders in dependency order
  tests/check_layers.py --selftest      each violation injected into a small
                                        tree of its own, and seen

A library folder (common, kernels, receipts, audit, parity, each folder
under trainer/ and each family folder under trainer/families/) has a README.md with one line

    May include: trainer/model, trainer/base, kernels, receipts, common

naming the folders its sources may include from ("nothing" for none).  The
check fails on:
  - a library folder without that line, or naming a folder that is not one;
  - an `#include "DIR/..."` of a folder the including folder's line does not
    name (tests/, bench/ and tools may include anything);
  - a circle between folders, or between the units of one folder (a unit is
    x.c with x.h and x_internal.h; unit a -> unit b when a's files include b.h);
  - two headers with one basename anywhere in the tree;
  - a reference to the design documents outside the repository.
"""
import os
import re
import sys

LIBS_TOP = ["common", "kernels", "receipts", "audit", "parity"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SKIP_DIRS = {"build", ".git", "fixtures", "corpus"}


def library_folders(root):
    libs = [d for d in LIBS_TOP if os.path.isdir(os.path.join(root, d))]
    tr = os.path.join(root, "trainer")
    libs += sorted("trainer/" + d for d in os.listdir(tr) if os.path.isdir(os.path.join(tr, d)))
    # a model family is a folder of its own under trainer/families/ (docs/design.md §2), a library folder
    # with its own line; the longest prefix decides which folder a file belongs to
    fam = os.path.join(tr, "families")
    if os.path.isdir(fam):
        libs += sorted("trainer/families/" + d for d in os.listdir(fam) if os.path.isdir(os.path.join(fam, d)))
    return libs


def folder_of(path, libs):
    """The library folder a repository path belongs to (longest prefix), or None."""
    best = None
    for lib in libs:
        if path == lib or path.startswith(lib + "/"):
            if best is None or len(lib) > len(best):
                best = lib
    return best


def allowed_of(root, lib, libs, errors):
    readme = os.path.join(root, lib, "README.md")
    if not os.path.isfile(readme):
        errors.append(f"{lib}/README.md: missing (every library folder states what it may include)")
        return set()
    m = re.search(r"^May include:\s*(.*)$", open(readme, encoding="utf-8").read(), re.M)
    if not m:
        errors.append(f"{lib}/README.md: no 'May include:' line")
        return set()
    names = [n.strip().strip("`") for n in m.group(1).split(",") if n.strip()]
    if names == ["nothing"]:
        return set()
    for n in names:
        if n not in libs:
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
    libs = library_folders(root)
    allowed = {lib: allowed_of(root, lib, libs, errors) for lib in libs}
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
                if target not in allowed[lib]:
                    errors.append(f"{path}:{line}: includes {inc} ({target}), which {lib}/README.md "
                                  f"does not allow (May include: {', '.join(sorted(allowed[lib])) or 'nothing'})")
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
        ("a family folder is a library folder", {"trainer/families/README.md": "May include: trainer/families/f, trainer/low\n",
                                                 "trainer/families/reg.c": '#include "trainer/families/f/f.h"\n',
                                                 "trainer/families/f/README.md": "May include: trainer/low\n",
                                                 "trainer/families/f/f.h": '#include "kernels/k.h"\n'},
         "trainer/families/f/f.h:1: includes kernels/k.h"),
        ("a family folder without its line", {"trainer/families/README.md": "May include: trainer/low\n",
                                              "trainer/families/f/f.c": ""}, "trainer/families/f/README.md: missing"),
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


def main(argv):
    if "--selftest" in argv:
        return selftest()
    order = "--order" in argv
    args = [a for a in argv if a != "--order"]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
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
