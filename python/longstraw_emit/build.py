"""The build identity: artifacts and their digest (docs/contract.md section 2).

build_digest(artifacts) = SHA-256 (hex) of the JCS text of {"artifacts": artifacts}.
collect_artifacts() gathers, in this order: the interpreter, each source tree,
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


def collect_artifacts(sources=(), packages=("torch",), env=(), native_libraries=True, exclude=()):
    """The build identity's artifacts. native_libraries: True (the packages'
    libraries), False (none), or a list of extra file-name prefixes. exclude:
    directories left out of the source trees (put the run directory here when
    it lies inside a source tree)."""
    arts = [interpreter_artifact()]
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
    """RunWriter's artifacts when none are given: the interpreter, the directory
    of the __main__ script (out_dir excluded), torch when installed, and
    OMP_NUM_THREADS."""
    sources = []
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main and os.path.isdir(os.path.dirname(os.path.abspath(main))):
        sources.append(os.path.dirname(os.path.abspath(main)))
    packages = []
    try:
        import torch  # noqa: F401

        packages.append("torch")
    except ImportError:
        pass
    return collect_artifacts(sources=sources, packages=packages, env=("OMP_NUM_THREADS",), exclude=(out_dir,))
