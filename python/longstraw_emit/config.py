"""The run config a v2 receipt and manifest carry (docs/contract.md section 2)."""

import json
import math
import re

from . import check
from .digests import DTYPES

REQUIRED = ("objective", "grad_mode", "dtype", "cp_ranks", "group", "steps_requested", "strategy",
            "faults", "n_layers", "model")
ENUMS = {"objective": ("grpo", "sft"), "grad_mode": ("full", "detached"), "dtype": DTYPES,
         "strategy": ("longstraw", "naive"), "train_mode": ("full", "lora")}
POSINTS = ("cp_ranks", "group", "steps_requested", "n_layers", "dp_ranks")
# Every key a v2 config may hold (schemas/receipt-v2.schema.json); anything
# else belongs under "options" (provenance) or "model".
KEYS = REQUIRED + ("train_mode", "lora_r", "lora_alpha", "lora_experts", "epsilon", "beta", "temperature",
                   "first_step", "dp_ranks", "options", "paths")
FAULT = re.compile(r"^[a-z][a-z0-9_.-]{0,47}$")
NONNEG = ("epsilon", "beta")

# The run's path (docs/contract.md section 2, "paths"): each key a decision that selects code, each value
# the sorted array of the values the run took. PATHS is the vocabulary the audit knows
# (receipts/format/coverage.c LS_COVERAGE_PATHS): the coverage check holds a run outside every parity report
# when it lacks one of these decisions, or records a decision or value not listed here. The writer
# refuses only malformed names: a value outside the vocabulary is written as the trainer says (and the
# audit then refuses to bind a level to it), never replaced by one that would pass.
PATHS = {"responses": ("sampled", "given", "target"), "old_logprobs": ("computed", "given", "none"),
         "reference": ("none", "before", "kept", "recaptured", "prefix", "naive", "given"),
         "prompt_groups": ("one", "several"), "prefix": ("fresh", "frozen"), "start": ("fresh", "resumed"),
         "shards": ("one", "even", "uneven"), "pages": ("aligned", "cut"), "chunks": ("aligned", "cut"),
         "task": ("retrieval", "recall", "none"), "replay": ("taped", "layer", "chunk"),
         "state_tier": ("device", "host")}
PATH_KEY = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
PATH_VALUE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
MAX_PATH_KEYS = 32
MAX_PATH_VALUES = 16


def check_path(key, value):
    """One (key, value) of the run's path; raises ValueError naming it."""
    check.ident("paths key", key, PATH_KEY)
    check.ident(f"paths.{key}", value, PATH_VALUE)
    return value


def check_paths(paths):
    """config.paths: {key: [values]} (a value may be given alone); returns {key: sorted distinct values}."""
    if not isinstance(paths, dict):
        raise ValueError("config.paths: not an object of key -> values")
    if len(paths) > MAX_PATH_KEYS:
        raise ValueError(f"config.paths: {len(paths)} keys, at most {MAX_PATH_KEYS}")
    out = {}
    for k, vs in paths.items():
        if isinstance(vs, str):
            vs = [vs]
        if not isinstance(vs, (list, tuple, set, frozenset)) or not vs:
            raise ValueError(f"config.paths.{k}: not a non-empty list of values")
        vals = sorted({check_path(k, v) for v in vs})
        if len(vals) > MAX_PATH_VALUES:
            raise ValueError(f"config.paths.{k}: {len(vals)} values, at most {MAX_PATH_VALUES}")
        out[k] = vals
    return out


def _free(where, v, depth=0):
    """model and options: objects of strings, finite numbers, booleans, null, arrays."""
    if depth > 32:
        raise ValueError(f"{where}: nested deeper than 32 levels")
    if v is None or isinstance(v, (str, bool)):
        return
    if isinstance(v, (int, float)):
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{where}: non-finite value {v!r} refused")
        return
    if isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _free(f"{where}[{i}]", x, depth + 1)
        return
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: key {k!r} is not a string")
            _free(f"{where}.{k}", x, depth + 1)
        return
    raise ValueError(f"{where}: {type(v).__name__} is not a string, number, boolean, array or object")


def check_config(config):
    """Validate config (raising ValueError/TypeError naming the key) and return
    a JSON-ready copy (a plain dict, round-tripped through JSON)."""
    if not isinstance(config, dict):
        raise TypeError("config: not a dict")
    extra = [k for k in config if k not in KEYS]
    if extra:
        raise ValueError(f"config.{extra[0]}: not a v2 config key (put it under config.options or config.model)")
    for k in REQUIRED:
        if k not in config:
            raise ValueError(f"config.{k}: missing (docs/contract.md section 2)")
    for k, allowed in ENUMS.items():
        if k in config:
            check.one_of(f"config.{k}", config[k], allowed)
    for k in POSINTS:
        if k in config or k in REQUIRED:
            check.uint(f"config.{k}", config[k], 1)
    for k in NONNEG:
        if k in config:
            check.number(f"config.{k}", config[k], nonneg=True)
    if "temperature" in config and check.number("config.temperature", config["temperature"]) <= 0:
        raise ValueError(f"config.temperature: {config['temperature']!r} is not positive")
    faults = config["faults"]
    if not isinstance(faults, (list, tuple)):
        raise ValueError("config.faults: not a list")
    for i, f in enumerate(faults):
        check.ident(f"config.faults[{i}]", f, FAULT)
    if "options" in config and not isinstance(config["options"], dict):
        raise ValueError("config.options: not an object")
    for k in ("first_step",):
        if k in config:
            check.uint(f"config.{k}", config[k])
    if "lora_r" in config:
        check.uint("config.lora_r", config["lora_r"], 1)
    if not isinstance(config["model"], dict):
        raise ValueError("config.model: not an object")
    if "paths" in config:
        config = dict(config, paths=check_paths(config["paths"]))
    for k, v in config.items():
        _free(f"config.{k}", v)
    return json.loads(json.dumps(config, allow_nan=False))
