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
POSINTS = ("cp_ranks", "group", "steps_requested", "n_layers")
# Every key a v2 config may hold (schemas/receipt-v2.schema.json); anything
# else belongs under "options" (provenance) or "model".
KEYS = REQUIRED + ("train_mode", "lora_r", "lora_alpha", "lora_experts", "epsilon", "beta", "temperature",
                   "first_step", "options")
FAULT = re.compile(r"^[a-z][a-z0-9_.-]{0,47}$")
NONNEG = ("epsilon", "beta")


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
    for k, v in config.items():
        _free(f"config.{k}", v)
    return json.loads(json.dumps(config, allow_nan=False))
