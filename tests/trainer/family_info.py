#!/usr/bin/env python3
"""family_info.py - a registered family's facts for the shell tests that run every family
(determinism.sh, cp_paths.sh), from the registry the build wrote (generated/families.json,
longstraw-train --families): so a family added by its folder and its line in
trainer/families/families.list gets those tests without a change to them.

  family_info.py BUILD_DIR SOURCE_DIR FAMILY config      its tiny config, an absolute path
  family_info.py BUILD_DIR SOURCE_DIR FAMILY cp-faults   the CP faults that apply to it, one a line
Exit 2 naming the registry file or the family when either is missing.
"""
import json
import os
import sys


def main(argv):
    if len(argv) != 4 or argv[3] not in ("config", "cp-faults"):
        print(__doc__, file=sys.stderr)
        return 2
    build, src, fam, what = argv
    path = os.environ.get("LS_FAMILIES_JSON") or os.path.join(build, "generated", "families.json")
    try:
        with open(path, encoding="utf-8") as f:
            reg = json.load(f)
    except (OSError, ValueError) as e:
        print(f"family_info: {path}: {e}", file=sys.stderr)
        return 2
    entry = next((f for f in reg.get("families", []) if f.get("name") == fam), None)
    if entry is None:
        names = ", ".join(f.get("name", "?") for f in reg.get("families", []))
        print(f"family_info: {path}: no family '{fam}' (registered: {names})", file=sys.stderr)
        return 2
    if what == "config":
        rel = entry.get("files", {}).get("tiny_config")
        if not rel:
            print(f"family_info: {path}: family '{fam}' names no tiny config", file=sys.stderr)
            return 2
        print(os.path.join(os.path.abspath(src), rel))
    else:
        for fault in entry.get("cp_faults", []):
            print(fault)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
