"""Test helper: a RunWriter with a valid config, groups and vocabulary."""

import os

import longstraw_emit as le

PHASES = ["capture", "rollout", "score", "replay", "prompt_bwd", "finalize", "optimizer"]
LAYER_KINDS = ["embed", "gdn", "attn", "head"]
ARTIFACTS = [{"role": "interpreter", "name": "python3", "version": "3.11.2", "sha256": "ab"},
             {"role": "environment", "name": "OMP_NUM_THREADS", "value": "1"}]


def config(**over):
    c = {"objective": "grpo", "grad_mode": "full", "dtype": "f64", "cp_ranks": 2, "group": 2,
         "steps_requested": 1, "strategy": "longstraw", "faults": [], "n_layers": 2,
         "model": {"family": "torch-cp", "d_model": 8, "rms_eps": 1e-6},
         "train_mode": "full", "epsilon": 0.2, "beta": 0.0, "temperature": 1.0, "options": {"seed": 1}}
    c.update(over)
    return c


def profile(tmp):
    p = os.path.join(tmp, "torch-cp.json")
    if not os.path.exists(p):
        # every rank of a multi-process test may get here at once: write a private
        # temporary and rename it, so that no rank ever digests a half-written file
        t = f"{p}.{os.getpid()}.tmp"
        with open(t, "w") as f:
            f.write('{"schema":"urn:longstraw:schema:profile:v1","name":"torch-cp"}\n')
        os.replace(t, p)
    return p


def writer(tmp, rank=0, world=1, run="run", **kw):
    args = dict(tool="test", groups=[le.Group("world", "world", list(range(world))),
                                     le.Group("cp", "cp", list(range(world)))],
                phases=PHASES, layer_kinds=LAYER_KINDS, config=config(), artifacts=ARTIFACTS)
    args.update(kw)
    return le.RunWriter(os.path.join(tmp, run), rank, world, "run-test", "torch-cp", profile(tmp), **args)
