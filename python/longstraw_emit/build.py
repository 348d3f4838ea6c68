"""The build identity: artifacts and their digest (docs/contract.md section 2).

build_digest(artifacts) = SHA-256 (hex) of the JCS text of {"artifacts": artifacts}.
collect_artifacts() gathers, in this order: the interpreter, the code by
content (the emitter itself and each module or directory named in `code`:
its Python files, wherever they were loaded from), each git source tree,
each package's version, the native libraries the process has mapped that
belong to those packages, and the named environment variables.
"""

import hashlib
import os
import platform
import subprocess
import sys

from .fsutil import sha256_file
from .jcs import jcs

ROLES = ("interpreter", "executable", "source", "package", "native_library", "environment", "other")

# Shared libraries a package loads from outside its own directory (distribution
# builds put them in the system library directory), by file-name prefix.
NATIVE_PREFIXES = {
    "torch": ("libtorch", "libc10", "libshm", "libcaffe2", "libgloo", "libnccl"),
}

SKIP_DIRS = frozenset(("__pycache__", ".git"))
# The files of a code artifact: what Python imports (sources and extension modules).
CODE_SUFFIXES = (".py", ".so")
MAX_CODE_FILES = 4096


def build_digest(artifacts):
    """SHA-256 (hex) of the JCS canonical JSON of {"artifacts": artifacts};
    raises JcsError (a ValueError) for a value outside the JCS subset."""
    check_artifacts(artifacts)
    return hashlib.sha256(jcs({"artifacts": list(artifacts)}).encode("utf-8")).hexdigest()


def check_artifacts(artifacts):
    if not isinstance(artifacts, (list, tuple)):
        raise TypeError("artifacts: not a list")
    for i, a in enumerate(artifacts):
        if not isinstance(a, dict):
            raise TypeError(f"artifacts[{i}]: not an object")
        if a.get("role") not in ROLES:
            raise ValueError(f"artifacts[{i}].role: {a.get('role')!r} is not one of {', '.join(ROLES)}")
        if not isinstance(a.get("name"), str) or not a["name"]:
            raise ValueError(f"artifacts[{i}].name: missing or empty")


def tree_digest(root, exclude=()):
    """SHA-256 of the lines "SHA256HEX  RELPATH\\n" (sha256sum's format) of every
    regular file under root, sorted by relative path (UTF-8 bytes), skipping
    __pycache__ and .git directories and *.pyc files; a symbolic link counts as
    the SHA-256 of its target text. Reproduce with:
      (cd ROOT && find . -name __pycache__ -prune -o -name .git -prune -o \\
       ! -name '*.pyc' \\( -type f -o -type l \\) -print | sed 's|^\\./||' | LC_ALL=C sort |
       xargs -d '\\n' sha256sum) | sha256sum
    (the link case aside). exclude: directories left out (a run directory
    written inside the tree while other ranks digest it)."""
    entries = []
    skip = {os.path.realpath(x) for x in exclude}
    for d, dirs, files in os.walk(root):
        links = [x for x in dirs if os.path.islink(os.path.join(d, x))]
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and x not in links
                   and os.path.realpath(os.path.join(d, x)) not in skip]
        for name in files + links:
            if name.endswith(".pyc"):
                continue
            full = os.path.join(d, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if os.path.islink(full):
                hexd = hashlib.sha256(os.readlink(full).encode("utf-8", "surrogateescape")).hexdigest()
            elif os.path.isfile(full):
                hexd = sha256_file(full)
            else:
                continue
            entries.append((rel.encode("utf-8", "surrogateescape"), hexd))
    entries.sort()
    h = hashlib.sha256()
    for rel, hexd in entries:
        h.update(hexd.encode() + b"  " + rel + b"\n")
    return h.hexdigest()


def code_files(root, exclude=()):
    """{relative path: SHA-256} of the Python files (*.py, extension modules
    *.so) under root (a directory) or of root itself (one module file),
    skipping __pycache__, .git and hidden directories and the excluded ones;
    symbolic links are followed (the content is what Python imports)."""
    root = os.path.abspath(root)
    if os.path.isfile(root):
        return {os.path.basename(root): sha256_file(root)}
    skip = {os.path.realpath(x) for x in exclude}
    files = {}
    for d, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith(".")
                         and os.path.realpath(os.path.join(d, x)) not in skip)
        for name in names:
            if not name.endswith(CODE_SUFFIXES):
                continue
            full = os.path.join(d, name)
            if not os.path.isfile(full):
                continue
            if len(files) >= MAX_CODE_FILES:
                raise ValueError(f"code: {root}: more than {MAX_CODE_FILES} Python files")
            files[os.path.relpath(full, root).replace(os.sep, "/")] = sha256_file(full)
    return files


def _code_root(target):
    """(root, default name) of a code target: a directory, a module file, or the
    name of an importable module or package (found without importing it)."""
    if os.path.isdir(target) or os.path.isfile(target):
        path = os.path.abspath(target)
        base = os.path.basename(path.rstrip(os.sep))
        return path, base[:-3] if base.endswith(".py") else base
    import importlib.util

    try:
        spec = importlib.util.find_spec(target)
    except (ImportError, ValueError) as e:
        raise ValueError(f"code: {target}: not a directory, a file or an importable module: {e}") from None
    if spec is None or spec.origin in (None, "built-in", "frozen"):
        raise ValueError(f"code: {target}: not a directory, a file or an importable module with files")
    if spec.submodule_search_locations:  # a package: its directory
        return os.path.dirname(os.path.abspath(spec.origin)), target
    return os.path.abspath(spec.origin), target


def code_artifact(target, name=None, exclude=()):
    """The code of a module, package or directory by content, wherever it was
    loaded from (installed, on PYTHONPATH, copied out of a git tree):
    {"role": "source", "name": NAME, "sha256": tree digest of the files,
    "files": {relative path: SHA-256}}. No commit and no path: two copies of
    the same files are the same code, and the files map lets a reader name
    the one that differs."""
    root, default = _code_root(target)
    files = code_files(root, exclude)
    if not files:
        raise ValueError(f"code: {target}: no Python files under {root}")
    h = hashlib.sha256()
    for rel in sorted(files, key=lambda r: r.encode("utf-8", "surrogateescape")):
        h.update(files[rel].encode() + b"  " + rel.encode("utf-8", "surrogateescape") + b"\n")
    return {"role": "source", "name": name or default, "sha256": h.hexdigest(),
            "files": {k: files[k] for k in sorted(files)}}


def _git(cwd, *args):
    try:
        p = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def source_artifact(path, name=None, exclude=()):
    """A source tree: its tree digest and, inside a git work tree, HEAD's commit,
    whether the tree differs from HEAD under path (untracked, non-ignored files
    included) and the SHA-256 of that difference; outside git: commit "unknown",
    dirty true, diff_sha256 null (nothing proves the files match a commit)."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"sources: {path}: not a directory")
    top = _git(path, "rev-parse", "--show-toplevel")
    art = {"role": "source"}
    if top is not None:
        top = top.decode("utf-8", "surrogateescape").strip()
        rel = os.path.relpath(path, top).replace(os.sep, "/")
        art["name"] = name or (rel if rel != "." else os.path.basename(top))
    else:
        art["name"] = name or os.path.basename(path)
    art["sha256"] = tree_digest(path, exclude)
    head = _git(path, "rev-parse", "HEAD") if top is not None else None
    if head is None:
        art.update(commit="unknown", dirty=True, diff_sha256=None)
        return art
    spec = ["."]
    for x in exclude:
        rel = os.path.relpath(os.path.realpath(x), os.path.realpath(path))
        if rel != "." and not rel.startswith(".."):
            spec.append(":(exclude)" + rel)
    status = _git(path, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *spec)
    diff = _git(path, "diff", "--binary", "HEAD", "--", *spec)
    if status is None or diff is None:
        art.update(commit=head.decode().strip(), dirty=True, diff_sha256=None)
        return art
    art["commit"] = head.decode().strip()
    art["dirty"] = bool(status)
    art["diff_sha256"] = hashlib.sha256(status + b"\0" + diff).hexdigest()
    return art


def interpreter_artifact():
    exe = os.path.realpath(sys.executable)
    art = {"role": "interpreter", "name": "python3", "version": platform.python_version()}
    art["sha256"] = sha256_file(exe) if os.path.isfile(exe) else None
    return art


def package_artifact(pkg):
    try:
        from importlib import metadata

        version = metadata.version(pkg)
    except Exception:
        version = None
    if version is None:
        import importlib

        try:
            version = str(getattr(importlib.import_module(pkg), "__version__", "unknown"))
        except ImportError as e:
            raise ValueError(f"packages: {pkg}: not importable: {e}") from None
    return {"role": "package", "name": pkg, "version": version}


def mapped_libraries():
    """Paths of the shared objects this process has mapped (/proc/self/maps)."""
    out = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6:
                    p = parts[5].strip()
                    if p.startswith("/") and ".so" in os.path.basename(p) and not p.endswith(" (deleted)"):
                        out.add(p)
    except OSError:
        pass
    return out


def _package_dir(pkg):
    import importlib

    try:
        m = importlib.import_module(pkg)
    except ImportError:
        return None
    f = getattr(m, "__file__", None)
    return os.path.dirname(os.path.realpath(f)) if f else None


def native_library_artifacts(packages, prefixes=()):
    """The mapped shared objects that lie under one of the packages' directories
    or whose file name starts with one of the packages' NATIVE_PREFIXES (or the
    given prefixes): name (file name) and SHA-256, sorted by name then digest."""
    dirs = [d + os.sep for d in (_package_dir(p) for p in packages) if d]
    pre = tuple(prefixes)
    for p in packages:
        pre += NATIVE_PREFIXES.get(p, ())
    arts = []
    seen = set()
    for path in mapped_libraries():
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real):
            continue
        base = os.path.basename(real)
        if any(real.startswith(d) for d in dirs) or (pre and base.startswith(pre)):
            seen.add(real)
            arts.append({"role": "native_library", "name": base, "sha256": sha256_file(real)})
    arts.sort(key=lambda a: (a["name"], a["sha256"]))
    return arts


def collect_artifacts(sources=(), packages=("torch",), env=(), native_libraries=True, exclude=(), code=()):
    """The build identity's artifacts. code: modules, packages or directories
    digested by content (code_artifact); the emitter's own package is always
    the first of them (it wrote the evidence). sources: git source trees
    (source_artifact: with the commit, so the same files at another place or
    commit are another identity; prefer code). native_libraries: True (the
    packages' libraries), False (none), or a list of extra file-name
    prefixes. exclude: directories left out of the code and source trees (put
    the run directory here when it lies inside one)."""
    arts = [interpreter_artifact()]
    own = os.path.dirname(os.path.abspath(__file__))
    targets = [own] + [c for c in code if os.path.realpath(c) != os.path.realpath(own) and c != __package__]
    names = set()
    for i, c in enumerate(targets):
        a = code_artifact(c, name=__package__ if i == 0 else None, exclude=exclude)
        if a["name"] in names:
            raise ValueError(f"code: {c}: a second code artifact named {a['name']!r}")
        names.add(a["name"])
        arts.append(a)
    for s in sources:
        arts.append(source_artifact(s, exclude=exclude))
    for p in packages:
        arts.append(package_artifact(p))
    if native_libraries:
        extra = () if native_libraries is True else tuple(native_libraries)
        arts.extend(native_library_artifacts(packages, extra))
    for name in env:
        v = os.environ.get(name)
        art = {"role": "environment", "name": name}
        if v is not None:  # unset: no value (set to "" is value "")
            art["value"] = v
        arts.append(art)
    check_artifacts(arts)
    jcs({"artifacts": arts})  # refuse early what the digest could not hold
    return arts


def default_artifacts(out_dir):
    """RunWriter's artifacts when none are given: the interpreter, the emitter
    and the directory of the __main__ script by content (out_dir excluded),
    torch when installed, and OMP_NUM_THREADS."""
    code = []
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main and os.path.isdir(os.path.dirname(os.path.abspath(main))):
        code.append(os.path.dirname(os.path.abspath(main)))
    packages = []
    try:
        import torch  # noqa: F401

        packages.append("torch")
    except ImportError:
        pass
    return collect_artifacts(code=code, packages=packages, env=("OMP_NUM_THREADS",), exclude=(out_dir,))
