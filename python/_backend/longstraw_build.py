"""longstraw_build: the PEP 517 / PEP 660 build backend of python/ (longstraw_emit).

Standard library only, so `pip install ./python` needs no index: pyproject.toml says
`requires = []`, and build isolation has nothing to fetch. It reads the name, version,
description, dependencies and extras from pyproject.toml's [project] table (the one
place they are written) and writes:

  build_wheel     NAME-VERSION-py3-none-any.whl: the package's .py files and the dist-info
  build_editable  the same dist-info and a .pth holding the absolute path of python/ (PEP 660)
  build_sdist     NAME-VERSION.tar.gz: pyproject.toml, README.md, _backend/, the package, PKG-INFO

Archives are reproducible: sorted entries, fixed timestamps, fixed modes and owners.
It writes only into the directories the front end hands it; nothing under python/.
"""

import base64
import csv
import gzip
import hashlib
import io
import os
import re
import sys
import tarfile
import zipfile

# Bytecode of the modules imported from here on is not written. This module's own was
# written by importlib before its first line ran (into python/_backend/__pycache__);
# take it back out so that a build leaves the source tree as it found it.
sys.dont_write_bytecode = True


def _drop_own_bytecode():
    cached = globals().get("__cached__")
    if not cached:
        return
    for remove, path in ((os.remove, cached), (os.rmdir, os.path.dirname(cached))):
        try:
            remove(path)  # rmdir only succeeds on an empty __pycache__
        except OSError:
            pass


_drop_own_bytecode()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
PYPROJECT = os.path.join(ROOT, "pyproject.toml")
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold
TAR_TIME = 315532800  # the same instant, 1980-01-01T00:00:00Z
METADATA_VERSION = "2.1"
# [project] keys this backend turns into metadata; any other key is an error, not ignored
KNOWN_KEYS = {"name", "version", "description", "requires-python", "dependencies", "optional-dependencies",
              "license"}


class BuildError(Exception):
    pass


# ---- pyproject.toml -----------------------------------------------------------------------------

def _load_toml(path):
    try:
        import tomllib  # Python >= 3.11
    except ImportError:
        try:
            import tomli as tomllib  # older Pythons: get_requires_for_build_* asks for it
        except ImportError:
            raise BuildError(f"{path}: reading it needs tomllib (Python >= 3.11) or the tomli package") from None
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise BuildError(f"{path}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise BuildError(f"{path}: not valid TOML: {e}") from None


def _string(project, key, required=True):
    value = project.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise BuildError(f"{PYPROJECT}: [project] {key} must be a non-empty one-line string, got {value!r}")
    return value.strip()


def _requirements(value, field):
    if not isinstance(value, list) or not all(isinstance(r, str) and r.strip() and "\n" not in r for r in value):
        raise BuildError(f"{PYPROJECT}: {field} must be a list of one-line requirement strings, got {value!r}")
    return [r.strip() for r in value]


def _project():
    """The [project] table, checked: a dict with the fields the metadata needs."""
    project = _load_toml(PYPROJECT).get("project")
    if not isinstance(project, dict):
        raise BuildError(f"{PYPROJECT}: no [project] table")
    unknown = sorted(set(project) - KNOWN_KEYS)
    if unknown:
        raise BuildError(f"{PYPROJECT}: [project] {', '.join(unknown)}: not supported by "
                         f"_backend/longstraw_build.py (it knows {', '.join(sorted(KNOWN_KEYS))})")
    p = {"name": _string(project, "name"), "version": _string(project, "version"),
         "summary": _string(project, "description", required=False),
         "requires_python": _string(project, "requires-python", required=False),
         "dependencies": _requirements(project.get("dependencies", []), "[project] dependencies"),
         "extras": {}, "license": None}
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", p["name"]):
        raise BuildError(f"{PYPROJECT}: [project] name {p['name']!r} is not a valid distribution name")
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*([a-z0-9.+-]*)", p["version"]):
        raise BuildError(f"{PYPROJECT}: [project] version {p['version']!r} is not a version")
    extras = project.get("optional-dependencies", {})
    if not isinstance(extras, dict):
        raise BuildError(f"{PYPROJECT}: [project.optional-dependencies] must be a table, got {extras!r}")
    for extra, reqs in sorted(extras.items()):
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", extra):
            raise BuildError(f"{PYPROJECT}: [project.optional-dependencies] {extra!r}: "
                             "an extra's name is lower case letters, digits and '-'")
        p["extras"][extra] = _requirements(reqs, f"[project.optional-dependencies] {extra}")
    lic = project.get("license")
    if lic is not None:
        if not (isinstance(lic, dict) and set(lic) == {"text"} and isinstance(lic["text"], str)):
            raise BuildError(f"{PYPROJECT}: [project] license: only {{text = \"...\"}} is supported, got {lic!r}")
        p["license"] = lic["text"].strip()
    # the import package is the distribution's name with '_' (longstraw-emit: longstraw_emit)
    p["package"] = re.sub(r"[-.]+", "_", p["name"]).lower()
    p["dist"] = f"{p['package']}-{p['version']}"  # file names: wheel, sdist, dist-info
    pkg_dir = os.path.join(ROOT, p["package"])
    if not os.path.isfile(os.path.join(pkg_dir, "__init__.py")):
        raise BuildError(f"{PYPROJECT}: [project] name {p['name']!r}: no package {pkg_dir}/__init__.py")
    _check_version_attr(pkg_dir, p["version"])
    return p


def _check_version_attr(pkg_dir, version):
    # the package's __version__, where it states one, must say what pyproject.toml says
    init = os.path.join(pkg_dir, "__init__.py")
    with open(init, encoding="utf-8") as f:
        m = re.search(r"^__version__\s*=\s*['\"]([^'\"]*)['\"]", f.read(), re.M)
    if m and m.group(1) != version:
        raise BuildError(f"{init}: __version__ = {m.group(1)!r}, but {PYPROJECT} [project] version = {version!r}")


# ---- metadata -----------------------------------------------------------------------------------

def _metadata(p):
    """Core metadata (METADATA in the wheel, PKG-INFO in the sdist), as bytes."""
    lines = [f"Metadata-Version: {METADATA_VERSION}", f"Name: {p['name']}", f"Version: {p['version']}"]
    if p["summary"]:
        lines.append(f"Summary: {p['summary']}")
    if p["license"]:
        lines.append(f"License: {p['license']}")
    if p["requires_python"]:
        lines.append(f"Requires-Python: {p['requires_python']}")
    lines += [f"Requires-Dist: {r}" for r in p["dependencies"]]
    for extra, reqs in p["extras"].items():
        lines.append(f"Provides-Extra: {extra}")
        for r in reqs:
            # a requirement with its own marker keeps it, and-ed with the extra's
            req, _, marker = r.partition(";")
            cond = f'({marker.strip()}) and extra == "{extra}"' if marker.strip() else f'extra == "{extra}"'
            lines.append(f"Requires-Dist: {req.strip()}; {cond}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _wheel_file():
    return b"Wheel-Version: 1.0\nGenerator: longstraw_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _package_files(p):
    """(archive name, absolute path) of the package's .py files, sorted; no __pycache__ or dot dirs."""
    pkg_dir = os.path.join(ROOT, p["package"])
    out = []
    for dirpath, dirnames, filenames in os.walk(pkg_dir):
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.startswith(".")]
        for fn in filenames:
            if fn.endswith(".py"):
                path = os.path.join(dirpath, fn)
                out.append((os.path.relpath(path, ROOT).replace(os.sep, "/"), path))
    return sorted(out)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- archives -----------------------------------------------------------------------------------

def _record_hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _write_wheel(wheel_directory, p, entries):
    """Write the wheel from entries [(archive name, bytes)] plus the dist-info; return its file name."""
    dist_info = f"{p['dist']}.dist-info"
    entries = sorted(entries) + [(f"{dist_info}/METADATA", _metadata(p)), (f"{dist_info}/WHEEL", _wheel_file())]
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in entries:
        writer.writerow([name, _record_hash(data), len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    entries.append((f"{dist_info}/RECORD", record.getvalue().encode("utf-8")))

    wheel_name = f"{p['dist']}-py3-none-any.whl"
    path = os.path.join(wheel_directory, wheel_name)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.external_attr = 0o100644 << 16  # a regular file, rw-r--r--
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return wheel_name


def _write_metadata_dir(metadata_directory, p):
    dist_info = os.path.join(metadata_directory, f"{p['dist']}.dist-info")
    os.makedirs(dist_info, exist_ok=True)
    for name, data in (("METADATA", _metadata(p)), ("WHEEL", _wheel_file())):
        with open(os.path.join(dist_info, name), "wb") as f:
            f.write(data)
    return os.path.basename(dist_info)


# ---- PEP 517 / PEP 660 hooks --------------------------------------------------------------------

def _requires():
    # tomllib is in the standard library from 3.11 on (Debian 12's python3); before it, tomli
    try:
        import tomllib  # noqa: F401
        return []
    except ImportError:
        return ["tomli>=1.1"]


def get_requires_for_build_wheel(config_settings=None):
    return _requires()


def get_requires_for_build_editable(config_settings=None):
    return _requires()


def get_requires_for_build_sdist(config_settings=None):
    return _requires()


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _write_metadata_dir(metadata_directory, _project())


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _write_metadata_dir(metadata_directory, _project())


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    p = _project()
    return _write_wheel(wheel_directory, p, [(name, _read(path)) for name, path in _package_files(p)])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # PEP 660's simplest form: a .pth line puts python/ itself on sys.path
    p = _project()
    pth = (f"__editable__.{p['dist']}.pth", (ROOT + "\n").encode("utf-8"))
    return _write_wheel(wheel_directory, p, [pth])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    files = [(name, path) for name, path in _package_files(p)]
    for name in ("pyproject.toml", "README.md", "_backend/longstraw_build.py"):
        path = os.path.join(ROOT, name)
        if not os.path.isfile(path):
            raise BuildError(f"{path}: missing, the sdist needs it")
        files.append((name, path))
    entries = sorted([(name, _read(path)) for name, path in files] + [("PKG-INFO", _metadata(p))])

    sdist_name = f"{p['dist']}.tar.gz"
    path = os.path.join(sdist_directory, sdist_name)
    with open(path, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=TAR_TIME) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in entries:
            info = tarfile.TarInfo(f"{p['dist']}/{name}")
            info.size, info.mtime, info.mode = len(data), TAR_TIME, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return sdist_name
