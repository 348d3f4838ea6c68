#!/usr/bin/env python3
"""family_schemas_check.py - the schemas name no model family: a family is its
folder and its line in trainer/families/families.list, and nothing in schemas/
changes when one is added.

  tests/tools/family_schemas_check.py REGISTRY SCHEMA_DIR   check; exit 1 naming every difference
  tests/tools/family_schemas_check.py --selftest REGISTRY SCHEMA_DIR
                                                            each difference injected, and seen

A run's "family" is an identifier in every schema; its keys (names, types,
ranges) are the registry's (longstraw-train --families, the build's
generated/families.json), and the receipt and manifest readers check a run's
config against it (receipts/format/registry_file.h: ls_registry_check_config,
tested by test_registry_config).  This check refuses, in any schema: a
"family" with an enum or a const (a list of families, or a branch per
family), and a property named after a key that
only families declare (outside a property named for a family key, a shared
name such as "heads" in another object is not one: the check looks at the
config objects, those that have a "family" property).  It also checks that
the registry gives every key a type and a range, which the readers need.
"""
import copy
import json
import os
import sys


def walk(doc, path="$"):
    """Every (path, object) in doc."""
    if isinstance(doc, dict):
        yield path, doc
        for k, v in doc.items():
            yield from walk(v, f"{path}/{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from walk(v, f"{path}/{i}")


def check(registry, schemas):
    errors = []
    fams = registry.get("families", [])
    names = {f.get("name") for f in fams}
    shared = {k.get("key") for k in registry.get("shared_keys", [])}
    fam_keys = {k.get("key") for f in fams for k in f.get("keys", [])} - shared
    for f in fams:
        for k in f.get("keys", []):
            missing = [x for x in ("key", "type", "min", "max") if x not in k]
            if missing or k.get("type") not in ("int", "real"):
                errors.append(f"registry: family '{f.get('name')}' key {k.get('key')!r}: "
                              f"no {', '.join(missing) or 'type int or real'} (the readers check a config by it)")
    for name in sorted(schemas):
        for path, obj in walk(schemas[name]):
            props = obj.get("properties")
            if not isinstance(props, dict) or not isinstance(props.get("family"), dict):
                continue
            fam = props["family"]
            for kw in ("enum", "const"):
                if kw in fam:
                    errors.append(f"schemas/{name} {path}/properties/family: \"{kw}\" names families "
                                  f"({fam[kw]}); a family is an identifier, its keys the registry's")
            if "family" in obj.get("required", []) or path.endswith("/config") or "vocab" in props:
                for k in sorted(set(props) & fam_keys):
                    errors.append(f"schemas/{name} {path}/properties/{k}: a family's key; the registry types "
                                  f"and ranges it (the family's descriptor), the readers check it")
    return errors


def selftest(registry, schemas):
    cases = []
    s = copy.deepcopy(schemas)
    s["plan.schema.json"]["properties"]["model"]["properties"]["family"] = {"enum": ["hybrid", "mla"]}
    cases.append(("a family enum", registry, s, "plan.schema.json $/properties/model/properties/family: \"enum\""))
    s = copy.deepcopy(schemas)
    cfg = s["receipt.schema.json"]["$defs"]["config"]
    cfg["oneOf"] = [{"properties": {"family": {"const": "hybrid"}}, "required": ["gdn_hk"]}]
    cases.append(("a branch per family", registry, s, "\"const\" names families"))
    s = copy.deepcopy(schemas)
    key = registry["families"][0]["keys"][0]["key"]
    s["manifest.schema.json"]["$defs"]["config"]["properties"][key] = {"type": "integer"}
    cases.append(("a family key as a property", registry, s, f"/properties/{key}: a family's key"))
    r = copy.deepcopy(registry)
    del r["families"][0]["keys"][0]["max"]
    cases.append(("a registry key without a range", r, schemas, "no max"))
    failed = 0
    clean = check(registry, schemas)
    if clean:
        print("family_schemas_check --selftest: the clean tree is not clean: " + "; ".join(clean), file=sys.stderr)
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
    schemas = {n: json.load(open(os.path.join(args[1], n), encoding="utf-8"))
               for n in sorted(os.listdir(args[1])) if n.endswith(".schema.json")}
    if selftest_mode:
        return selftest(registry, schemas)
    errors = check(registry, schemas)
    for e in errors:
        print("family_schemas_check: " + e, file=sys.stderr)
    if errors:
        return 1
    print(f"family_schemas_check: {len(schemas)} schemas name none of the {len(registry['families'])} "
          f"registered families or their keys")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
