"""The gradient probe (docs/emitter.md "le.gradient_probe"): the gradient a trainer is about to apply,
held against directional finite differences of its own loss, written as a `gradient_probe` event.

For each group of tensors (one group by default) a seeded random direction v (each member tensor's own
unit direction over sqrt(k), k the group's size), the loss at theta + h v, theta - h v, theta + h/2 v,
theta - h/2 v (no backward), the Richardson extrapolation (4 D(h/2) - D(h)) / 3 against <g, v> of the
applied gradient. The tolerance is parity's finite differences' (parity/parity_fd.c): 1e-7 relative,
or the error budget 2 (rounding floor + truncation estimate) where that is larger; the rounding floor
is 3 x 4 ulp x max|L| / h. The parameters are restored bit for bit after every evaluation.

Under context parallelism every rank calls it with the same arguments (the loss closure runs the
trainer's collective forward); the verdicts are reduced over the process group so that every rank
writes the same ones.
"""

import math
import re
import time

from . import check

LOSS_ULPS = 4.0        # the rounding assumed of each loss (parity/parity_fd.c FD_LOSS_ULPS)
_EPS = {"f64": 2.0 ** -52, "f32": 2.0 ** -23, "bf16": 2.0 ** -7, "f16": 2.0 ** -10}
_DEFAULT_H = {"f64": 1e-4, "f32": 1e-2, "bf16": 1e-1, "f16": 1e-1}
# the relative tolerance of the parameters' dtype (the event's "tol"); a group passes within
# max(tol, (2 rounding_floor + error_estimate) / |derivative|)
TOL = {"f64": 1e-6, "f32": 1e-3, "bf16": 5e-2, "f16": 5e-2}
_LAYER = re.compile(r"^(layers?|blocks?|h)\.(\d+)\.")
VERDICTS = ("pass", "fail", "reported", "not_applicable")
GROUP_VERDICTS = ("pass", "fail", "reported")
BIG = 1.7976931348623157e308   # a non-finite number as the event writes it (the reader takes finite numbers)


def _dtype_name(t):
    import torch

    return {torch.float64: "f64", torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}.get(t.dtype)


def layer_groups(names):
    """{group: [names]}: tensors named layers.N.* (or layer., blocks., h.) grouped by N, the others
    (embedding, final norm, head) in group "other", in order of first appearance."""
    out = {}
    for n in names:
        m = _LAYER.match(n)
        out.setdefault(f"layers.{m.group(2)}" if m else "other", []).append(n)
    return out


def richardson(L, h):
    """(derivative, error estimate) from the losses at +h, -h, +h/2, -h/2 (parity_fd.c)."""
    d1 = (L[0] - L[1]) / (2 * h)
    d2 = (L[2] - L[3]) / h
    return (4 * d2 - d1) / 3, abs(d2 - d1) / 3


def judge(fd, applied, est, floor, tol):
    """(rel_error, tolerance, ok): pass when |applied - fd| / |fd| <= max(tol, (2 floor + est) / |fd|);
    a zero derivative is judged absolutely against the error budget."""
    if not (math.isfinite(fd) and math.isfinite(applied)):
        return math.inf, tol, False
    diff = abs(applied - fd)
    budget = 2.0 * floor + est
    if fd != 0:
        return diff / abs(fd), max(tol, budget / abs(fd)), diff / abs(fd) <= max(tol, budget / abs(fd))
    rel = 0.0 if diff == 0 else (diff * tol / budget if budget > 0 else math.inf)
    return rel, tol, rel <= tol


def _event_number(x):
    """A number as the event holds it: finite (a non-finite one becomes +-BIG; the verdict fails)."""
    if math.isnan(x):
        return BIG
    return max(-BIG, min(BIG, x))


def _world(process_group):
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size(process_group) if process_group is not None \
            else torch.distributed.get_world_size()
    return 1


def _ranks_agree(numbers, process_group):
    """Every rank computed the same numbers: their bytes' SHA-256 all-gathered and compared."""
    import hashlib
    import struct

    import torch

    if _world(process_group) == 1:
        return True
    dig = hashlib.sha256(b"".join(struct.pack("<d", float(x)) for x in numbers)).digest()
    mine = torch.tensor(list(dig), dtype=torch.uint8)
    out = [torch.empty_like(mine) for _ in range(_world(process_group))]
    torch.distributed.all_gather(out, mine, group=process_group)
    return all(torch.equal(o, out[0]) for o in out)


def _any_rank(flags, process_group):
    """Per position, true when it is true on any rank."""
    import torch

    if _world(process_group) == 1 or not flags:
        return flags
    t = torch.tensor([1 if f else 0 for f in flags], dtype=torch.int64)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX, group=process_group)
    return [bool(x) for x in t.tolist()]


def gradient_probe(writer, step, loss_fn, params, grads, grad_mode="full", objective="grpo", h=None, seed=0,
                   groups=None, tol=None, process_group=None, not_applicable=None):
    """Probe the gradient GRADS about to be applied to PARAMS against the loss LOSS_FN computes;
    write one gradient_probe event (docs/contract.md section 1, the fields of
    schemas/event-gradient_probe.schema.json in the v2 envelope) and return its fields.

    writer      the RunWriter (None: compute and return, write nothing)
    step        the optimizer step
    loss_fn     a closure over the trainer's parameters with the step's batch held fixed (responses,
                old and reference log-probs, advantages): returns the loss at the parameters' current
                values, a number or 0-dim tensor, or (loss, scale) with scale the loss's rounding scale
                (the sum of the magnitudes of its terms: a loss near 0 by cancellation rounds at the
                scale of its terms; default |loss|). Called under torch.no_grad(), 4 times per group;
                under CP every rank calls it (it runs the trainer's collective forward).
    params      (name, tensor) pairs or a dict: the trainable tensors (moved in place, restored bit for bit)
    grads       {name: tensor}: the gradient the optimizer applies (same shapes)
    grad_mode   "full" (judged: pass or fail) or "detached" (the applied gradient is not the loss's
                derivative by design: measured, verdict reported)
    objective   the step's loss, "grpo" or "sft"
    h           the larger step (the other is h/2) [1e-4 in float64, 1e-2 in float32]
    seed        the directions' seed (at most 2^53-1)
    groups      None (one group, "all": grouping "all"), "layer" (layers.N.* by N, the rest "other":
                grouping "layer")
    tol         the relative tolerance [1e-6 float64, 1e-3 float32]
    process_group  the torch.distributed group of the ranks that probe together (None: the default
                group when initialised): verdicts are reduced over it, the ranks' numbers compared
    not_applicable  a reason: write verdict not_applicable (no evaluation), e.g. a step whose gradient
                is of a stale prompt state
    """
    import torch

    t0 = time.perf_counter()
    step = check.uint("gradient_probe.step", step)
    check.one_of("gradient_probe.grad_mode", grad_mode, ("full", "detached"))
    check.one_of("gradient_probe.objective", objective, ("grpo", "sft"))
    seed = check.uint("gradient_probe.seed", seed)
    items = list(params.items() if isinstance(params, dict) else params)
    names = [n for n, _ in items]
    if len(set(names)) != len(names) or not names:
        raise ValueError("gradient_probe.params: no tensors, or a name repeats")
    P = dict(items)
    for n in names:
        check.token("gradient_probe.params name", n)
        if n not in grads:
            raise ValueError(f"gradient_probe.grads: no gradient for {n!r}")
        if tuple(grads[n].shape) != tuple(P[n].shape):
            raise ValueError(f"gradient_probe.grads: {n!r} has shape {tuple(grads[n].shape)}, "
                             f"the parameter {tuple(P[n].shape)}")
    dt = _dtype_name(P[names[0]])
    if dt is None:
        raise ValueError(f"gradient_probe.params: {names[0]!r} is not a floating tensor")
    tol = TOL[dt] if tol is None else float(check.number("gradient_probe.tol", tol, nonneg=True))
    h = _DEFAULT_H[dt] if h is None else float(check.number("gradient_probe.h", h, nonneg=True))
    if not h > 0:
        raise ValueError("gradient_probe.h: must be positive")
    if groups is None:
        grouping, gmap = "all", {"all": names}
    elif groups == "layer":
        grouping, gmap = "layer", layer_groups(names)
    else:
        raise ValueError("gradient_probe.groups: None (all) or 'layer'")

    fields = {"step": step, "objective": objective, "grad_mode": grad_mode, "grouping": grouping}
    if not_applicable is not None:
        fields.update(h=0.0, seed=seed, evaluations=0, seconds=time.perf_counter() - t0, tol=tol,
                      verdict="not_applicable", reason=str(not_applicable) or "not applicable",
                      ranks_agree=True, groups=[])
        if writer is not None:
            writer.gradient_probe(**fields)
        return fields

    out_groups, evaluations, numbers = [], 0, []
    index = {n: i for i, n in enumerate(names)}
    saved = {n: P[n].detach().clone() for n in names}
    try:
        for gname, members in gmap.items():
            dirs = {}
            scale = 1.0 / math.sqrt(len(members))
            for n in members:
                gen = torch.Generator().manual_seed((seed * 1000003 + index[n]) % (1 << 63))
                d = torch.randn(tuple(P[n].shape), generator=gen, dtype=torch.float64)
                nrm = float(d.norm())
                d = d / nrm if nrm > 0 else d
                dirs[n] = d * scale if len(members) > 1 else d
            L, S = [], []
            applied = 0.0
            for k in (1.0, -1.0, 0.5, -0.5):
                with torch.no_grad():
                    moved = {}
                    for n in members:
                        P[n].copy_((saved[n].to(torch.float64) + (k * h) * dirs[n]).to(P[n].dtype))
                        if k == 1.0:
                            # <g, v> as the weights were actually moved: (theta + h v) - theta, over h
                            moved[n] = (P[n].detach().to(torch.float64) - saved[n].to(torch.float64)) / h
                    if k == 1.0:
                        applied = sum(float((grads[n].detach().to(torch.float64) * moved[n]).sum())
                                      for n in members)
                    try:
                        v = loss_fn()
                    finally:
                        for n in members:
                            P[n].copy_(saved[n])
                loss, sc = (v if isinstance(v, tuple) else (v, None))
                L.append(float(loss))
                S.append(abs(float(sc)) if sc is not None else abs(float(loss)))
                evaluations += 1
            fd, est = richardson(L, h)
            floor = 3.0 * LOSS_ULPS * _EPS[dt] * max(S) / h
            rel, gtol, ok = judge(fd, applied, est, floor, tol)
            out_groups.append({"name": gname, "tensors": len(members), "derivative": _event_number(fd),
                               "applied": _event_number(applied), "error_estimate": _event_number(est),
                               "rounding_floor": _event_number(floor), "rel_error": _event_number(rel),
                               "tolerance": _event_number(gtol), "h": h, "decided_alike": True, "ok": ok})
            numbers += [fd, applied, est, floor]
    finally:
        with torch.no_grad():
            for n in names:
                P[n].copy_(saved[n])
    # every rank writes the same verdicts: a group fails when it fails on any rank, and the
    # probe fails when the ranks' numbers differ (a gradient the ranks did not agree on)
    agree = _ranks_agree(numbers, process_group)
    failed = _any_rank([not g.pop("ok") for g in out_groups], process_group)
    judged = grad_mode == "full"
    for g, f in zip(out_groups, failed):
        g["verdict"] = ("fail" if f else "pass") if judged else "reported"
    verdict = ("fail" if any(failed) or not agree else "pass") if judged else "reported"
    fields.update(h=h, seed=seed, evaluations=evaluations, seconds=time.perf_counter() - t0, tol=tol,
                  verdict=verdict)
    if judged and not agree:
        fields["reason"] = "the ranks computed different numbers (their applied gradients differ)"
    elif judged and any(failed):
        fields["reason"] = "the applied gradient differs from the loss's derivative in " + \
            ", ".join(g["name"] for g, f in zip(out_groups, failed) if f)
    fields.update(ranks_agree=agree, groups=out_groups)
    if writer is not None:
        writer.gradient_probe(**fields)
    return fields
