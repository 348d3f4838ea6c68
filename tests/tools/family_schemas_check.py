#!/usr/bin/env python3
"""family_schemas_check.py - the schemas' family parts against the registry of
model families (longstraw-train --families, the build's generated/families.json).

  tests/tools/family_schemas_check.py REGISTRY SCHEMA_DIR   check; exit 1 naming every difference
  tests/tools/family_schemas_check.py --selftest            each difference injected, and seen

The manifest and receipt schemas validate a run's config per family (a oneOf
branch per family, requiring exactly that family's keys), and the manifest,
receipt and plan schemas name the families in the config's "family" enum.  A
family added to trainer/families/families.list must be added there too; this
check says what to add, and refuses a branch or enum entry no registered
family has.
"""
import copy
import json
import os
import sys

CONFIG_SCHEMAS = ["manifest.schema.json", "receipt.schema.json"]
ENUM_SCHEMAS = CONFIG_SCHEMAS + ["plan.schema.json"]


def family_enums(doc, path="$"):
    """Every {"family": {"enum": [...]}} properties entry, with its path."""
    if isinstance(doc, dict):
        props = doc.get("properties")
        if isinstance(props, dict) and isinstance(props.get("family"), dict) and "enum" in props["family"]:
            yield path, props["family"]["enum"]
        for k, v in doc.items():
            yield from family_enums(v, f"{path}/{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from family_enums(v, f"{path}/{i}")


def check(registry, schemas):
    errors = []
    fams = {f["name"]: [k["key"] for k in f["keys"]] for f in registry["families"]}
    names = sorted(fams)
    for name in ENUM_SCHEMAS:
        found = list(family_enums(schemas[name]))
        if not found:
            errors.append(f"schemas/{name}: no \"family\" enum")
        for path, enum in found:
            if sorted(enum) != names:
                errors.append(f"schemas/{name} {path}: family enum {sorted(enum)}, the registry has {names}")
    for name in CONFIG_SCHEMAS:
        cfg = schemas[name].get("$defs", {}).get("config", {})
        branches = {}
        for b in cfg.get("oneOf", []):
            const = b.get("properties", {}).get("family", {}).get("const")
            branches[const] = b.get("required", [])
        for fam, keys in fams.items():
            if fam not in branches:
                errors.append(f"schemas/{name} $defs/config: no oneOf branch for family '{fam}' "
                              f"(one requiring {keys})")
            elif sorted(branches[fam]) != sorted(keys):
                errors.append(f"schemas/{name} $defs/config: family '{fam}' requires {sorted(branches[fam])}, "
                              f"its keys are {sorted(keys)}")
            for k in keys:
                if k not in cfg.get("properties", {}):
                    errors.append(f"schemas/{name} $defs/config: no property for family '{fam}' key '{k}'")
        for fam in branches:
            if fam not in fams:
                errors.append(f"schemas/{name} $defs/config: a oneOf branch for '{fam}', which no registered family is")
    return errors


def selftest(registry, schemas):
    cases = []
    r = copy.deepcopy(registry)
    r["families"].append({"name": "third", "keys": [{"key": "zz"}]})
    cases.append(("a registered family the schemas lack", r, schemas, "no oneOf branch for family 'third'"))
    r = copy.deepcopy(registry)
    r["families"][0]["keys"].append({"key": "zz"})
    cases.append(("a family key the schemas lack", r, schemas, "its keys are"))
    s = copy.deepcopy(schemas)
    for _, enum in family_enums(s["plan.schema.json"]):
        enum.append("gone")
    cases.append(("an enum entry of no family", registry, s, "plan.schema.json"))
    s = copy.deepcopy(schemas)
    s["manifest.schema.json"]["$defs"]["config"]["oneOf"][0]["required"].pop()
    cases.append(("a branch missing a key", registry, s, "requires"))
    failed = 0
    if check(registry, schemas):
        print("family_schemas_check --selftest: the clean tree is not clean", file=sys.stderr)
        failed += 1
    for what, r, s, want in cases:
        if not any(want in e for e in check(r, s)):
            print(f"family_schemas_check --selftest: {what}: not seen", file=sys.stderr)
            failed += 1
    print(f"family_schemas_check --selftest: {len(cases) + 1 - failed}/{len(cases) + 1} cases as expected")
    return 1 if failed else 0


def main(argv):
    selftest_mode = "--selftest" in argv
    args = [a for a in argv if a != "--selftest"]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    registry = json.load(open(args[0], encoding="utf-8"))
    schemas = {n: json.load(open(os.path.join(args[1], n), encoding="utf-8")) for n in ENUM_SCHEMAS}
    if selftest_mode:
        return selftest(registry, schemas)
    errors = check(registry, schemas)
    for e in errors:
        print("family_schemas_check: " + e, file=sys.stderr)
    if errors:
        return 1
    print(f"family_schemas_check: {len(registry['families'])} families, the schemas agree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
