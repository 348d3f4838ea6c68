#!/usr/bin/env python3
"""make_report.py RUN OUT [EDIT...]: a parity report written by hand, a test
fixture for the audit's level logic only (longstraw-parity writes the real
ones): it names RUN's build digest, covers runs like RUN (its manifest's
configuration, CP sizes 1, 2 and RUN's, float64 and RUN's dtype), every
check passing and every control detected.  No trainer run stands behind it.

EDITs change it: "KEY=JSON" sets coverage[KEY] (a dotted KEY reaches into an
object: model.d_model=128; model_sha256 is recomputed), except the top-level
keys schema and build_digest (set at both levels for build_digest);
"-KEY" deletes a top-level key."""
import hashlib
import json
import sys

MODEL_KEYS = ["family", "vocab", "d_model", "n_layers", "ffn_dim", "rms_eps", "rope_theta", "gdn_hk", "gdn_hv",
              "gdn_dk", "gdn_dv", "conv_kernel", "attn_heads", "attn_kv_heads", "head_dim", "rope_dim", "first_dense",
              "heads", "q_rank", "kv_rank", "d_nope", "d_rope", "d_v", "index_heads", "index_dim", "index_topk",
              "n_experts", "n_group", "topk_group", "experts_per_token", "expert_dim", "routed_scale"]


def model_sha(model):
    return hashlib.sha256(json.dumps(model, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def main():
    run, out = sys.argv[1], sys.argv[2]
    m = json.load(open(run + "/manifest.json"))["predicate"]
    cfg, build, world = m["config"], m["build"]["build_digest"], m["world"]
    model = {k: cfg[k] for k in MODEL_KEYS if k in cfg}
    tm = {"train_mode": cfg["train_mode"]}
    if cfg["train_mode"] != "full":
        tm.update(lora_r=cfg["lora_r"], lora_alpha=cfg["lora_alpha"], lora_experts=cfg["lora_experts"])
    obj = {"objective": "grpo", "epsilon": cfg["epsilon"], "beta": cfg["beta"], "temperature": cfg["temperature"]}
    worlds = sorted({1, 2, world})
    dtypes = sorted({"f64", cfg["dtype"]})
    cov = {"family": cfg["family"], "model": model, "model_sha256": model_sha(model), "train_modes": [tm],
           "objectives": [obj], "grad_modes": ["detached", "full"], "strategies": ["longstraw"], "dtypes": dtypes,
           "worlds": worlds, "build_digest": build, "reducible": "lengths"}
    if "paths" in cfg:  # the run's own path, as exercised (a run without one is outside any report)
        cov["paths"] = {k: sorted(set(v)) for k, v in cfg["paths"].items()}
    checks = []
    kinds = ["logprob", "cp_grad", "cp_params", "grad", "ref_logprob", "fd_grad", "ref_loss"]
    if cfg["family"] == "mla":  # the near-tie check of a forward that decides (DSA top-k, MoE routing)
        kinds.append("decisions")
    for kind in kinds:
        link = kind in ("ref_logprob", "fd_grad", "ref_loss", "decisions")
        for w in ([1] if link else worlds):
            for dt in (["f64"] if link else dtypes):
                checks.append({"name": "fixture-%s-%s-%d" % (kind, dt, w), "kind": kind, "dtype": dt, "world": w,
                               "configuration": "fixture", "reference": "fixture", "candidate": "fixture",
                               "max_abs_err": 0, "max_rel_err": 0, "tolerance": 1e-10, "worst": "t", "pass": True})
    faults = {"hybrid": [("cp-local-attention", "logprob"), ("skip-dkv-reduce", "cp_grad"),
                         ("skip-grad-finalize", "cp_grad"), ("detached", "grad")],
              "mla": [("cp-local-dsa", "logprob"), ("skip-grad-finalize", "cp_grad"), ("detached", "grad")]}
    controls = []
    for f, breaks in faults[cfg["family"]]:
        cmp = dict(checks[0], pass_=False)
        cmp.pop("pass_")
        cmp["pass"] = False
        controls.append({"fault": f, "breaks": breaks, "dtype": "f64", "world": 2, "configuration": "fixture",
                         "check": "fixture", "max_rel_err": 0.1, "tolerance": 1e-10, "detected": True,
                         "comparison": cmp})
    d = {"schema": "urn:longstraw:schema:parity:v3", "build_digest": build, "family": cfg["family"],
         "dtypes": dtypes, "worlds": worlds, "trainer": "fixture", "model_config": "fixture", "fd_step": 1e-4,
         "created_unix_ns": 0,
         "configurations": [{"name": "fixture", "what": "", "prompt_len": 30, "group": 2, "response_lens": [3, 5],
                             "train_mode": cfg["train_mode"], "page_size": 8, "capture_chunk": 12}],
         "checks": checks, "controls": controls, "links": [], "levels": [], "timings": [], "notes": [],
         "pass": True, "coverage": cov}
    for e in sys.argv[3:]:
        if e.startswith("-"):
            d.pop(e[1:], None)
            continue
        k, v = e.split("=", 1)
        v = json.loads(v) if v[:1] in "[{\"0123456789-tfn" and not (k == "build_digest" or k == "schema") else v
        if k in ("schema",):
            d[k] = v
        elif k == "build_digest":
            d[k] = v
            cov[k] = v
        elif "." in k:
            a, b = k.split(".", 1)
            cov[a][b] = v
            if a == "model":
                cov["model_sha256"] = model_sha(cov["model"])
        else:
            cov[k] = v
    json.dump(d, open(out, "w"), indent=1)


main()
