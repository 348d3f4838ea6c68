"""The gradient probe (docs/emitter.md "le.gradient_probe"): the gradient a trainer is about to apply,
held against directional finite differences of its own loss, written as a `gradient_probe` event.

For each group of tensors (one "all", or one per layers.N and "other": longstraw-train's
--probe-groups) a seeded random direction v (each member tensor's own Gaussian unit direction over
sqrt(k), k the group's size), the loss at theta + h v, theta - h v, theta + h/2 v, theta - h/2 v (no
backward), Richardson's D = (4 D(h/2) - D(h)) / 3 against the applied gradient <g, v> over the weights as
actually moved, combined as the losses are. The judgement is longstraw-train's (trainer/step/probe.h):
pass when |D - <g, v>| <= max(tol |D|, 2 floor + est), est = |D(h) - D(h/2)| / 3, floor = 3 x 4 ulp x M / h
(M the largest |loss| or rounding scale of the evaluations); a group whose budget exceeds a tenth of |D|
is not judged. The parameters are restored by copy, bit for bit, after every evaluation.

Under context parallelism every rank calls it with the same arguments (the loss closure runs the
trainer's collective forward); the verdicts are reduced over the process group so that every rank
writes the same ones.
"""

import math
import re
import time

from . import check

LOSS_ULPS = 4.0        # the rounding assumed of each loss (parity/compare/parity_fd.c FD_LOSS_ULPS)
_EPS = {"f64": 2.0 ** -52, "f32": 2.0 ** -23, "bf16": 2.0 ** -7, "f16": 2.0 ** -10}
# the step and the relative tolerance of the parameters' dtype (the event's h and tol): longstraw-train's
# (trainer/step/probe_result.c); a group passes within max(tol, (2 rounding_floor + error_estimate) / |D|)
_DEFAULT_H = {"f64": 1e-4, "f32": 3e-2, "bf16": 1e-1, "f16": 1e-1}
TOL = {"f64": 1e-6, "f32": 1e-2, "bf16": 5e-2, "f16": 5e-2}
MAX_BUDGET = 0.1       # a group whose error budget exceeds this share of |D| is not judged (unresolved)
_LAYER = re.compile(r"^layers\.(\d+)\.")
VERDICTS = ("pass", "fail", "reported", "not_applicable")
GROUP_VERDICTS = ("pass", "fail", "reported", "not_applicable")
CAP = 1e300            # a relative error or tolerance past it is written as it (longstraw-train's cap)


def _dtype_name(t):
    import torch

    return {torch.float64: "f64", torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}.get(t.dtype)


def layer_groups(names):
    """{group: [names]}: tensors named layers.N.* grouped by N, the others (embedding, final norm, head)
    in group "other", in order of first appearance."""
    out = {}
    for n in names:
        m = _LAYER.match(n)
        out.setdefault(f"layers.{m.group(1)}" if m else "other", []).append(n)
    return out


def richardson(L, h):
    """(derivative, error estimate) from the losses at +h, -h, +h/2, -h/2 (parity_fd.c)."""
    d1 = (L[0] - L[1]) / (2 * h)
    d2 = (L[2] - L[3]) / h
    return (4 * d2 - d1) / 3, abs(d2 - d1) / 3


def judge(fd, applied, est, floor, tol):
    """(rel_error, tolerance, ok, unresolved) as longstraw-train judges a group (trainer/step/probe.c):
    pass when |D - applied| <= max(tol |D|, 2 floor + est); D = 0: the error over the budget's scale;
    unresolved when the budget exceeds MAX_BUDGET of |D| (not judged)."""
    diff = abs(fd - applied)
    budget = 2.0 * floor + est
    tolerance = tol
    if fd != 0:
        rel = diff / abs(fd)
        tolerance = max(tol, budget / abs(fd))
    else:
        rel = 0.0 if diff == 0 else (diff / (budget / tol) if budget > 0 else CAP)
    unresolved = fd != 0 and budget / abs(fd) > MAX_BUDGET
    return min(rel, CAP), min(tolerance, CAP), rel <= tolerance, unresolved


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
    """_probe's, with le.instrument paused: the probe's re-evaluations of the loss and its own
    agreement checks communicate, and are no part of the step's transaction."""
    from .intercept import active

    inst = active()
    args = (writer, step, loss_fn, params, grads, grad_mode, objective, h, seed, groups, tol, process_group,
            not_applicable)
    if inst is None:
        return _probe(*args)
    with inst.paused():
        return _probe(*args)


def _probe(writer, step, loss_fn, params, grads, grad_mode="full", objective="grpo", h=None, seed=0,
           groups=None, tol=None, process_group=None, not_applicable=None):
    """Probe the gradient GRADS about to be applied to PARAMS against the loss LOSS_FN computes;
    write one gradient_probe event (docs/contract.md section 1, the fields of
    schemas/event-gradient_probe.schema.json in the v2 envelope) and return its fields.

    writer      the RunWriter (None: compute and return, write nothing)
    step        the optimizer step
    loss_fn     a closure over the trainer's parameters with the step's batch held fixed (responses,
                old and reference log-probs, advantages): returns the loss at the parameters' current
                values, a number or 0-dim tensor, or (loss, scale) with scale the loss's rounding scale
                (longstraw-train's: sum |dL/dlogp| |logp| over the log-probs: a GRPO loss near 0 at the
                step's own policy rounds at the scale of its terms; default |loss|). Called under torch.no_grad(), 4 times per group;
                under CP every rank calls it (it runs the trainer's collective forward).
    params      (name, tensor) pairs or a dict: the trainable tensors (moved in place, restored bit for bit)
    grads       {name: tensor}: the gradient the optimizer applies (same shapes)
    grad_mode   "full" (judged: pass or fail) or "detached" (the applied gradient is not the loss's
                derivative by design: measured, verdict reported)
    objective   the step's loss, "grpo" or "sft"
    h           the larger step (the other is h/2) [1e-4 in float64, 3e-2 in float32]
    seed        the directions' seed (at most 2^53-1)
    groups      None (one group, "all": grouping "all"), "layer" (layers.N.* by N, the rest "other":
                grouping "layer")
    tol         the relative tolerance [1e-6 float64, 1e-2 float32]
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
    g64 = {n: grads[n].detach().to(torch.float64) for n in names}
    full = grad_mode == "full"
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
            L, S, A = [], [], []
            for k in (1.0, -1.0, 0.5, -0.5):
                with torch.no_grad():
                    a_k = 0.0
                    for n in members:
                        P[n].copy_((saved[n].to(torch.float64) + (k * h) * dirs[n]).to(P[n].dtype))
                        # <g, theta_k - theta>: the weights as actually moved (rounded to their dtype)
                        a_k += float((g64[n] * (P[n].detach().to(torch.float64) - saved[n].to(torch.float64))).sum())
                    try:
                        v = loss_fn()
                    finally:
                        for n in members:
                            P[n].copy_(saved[n])
                loss, sc = (v if isinstance(v, tuple) else (v, None))
                L.append(float(loss))
                S.append(max(abs(float(loss)), abs(float(sc)) if sc is not None else 0.0))
                A.append(a_k)
                evaluations += 1
            fd, est = richardson(L, h)
            applied = (4 * ((A[2] - A[3]) / h) - (A[0] - A[1]) / (2 * h)) / 3
            floor = 3.0 * LOSS_ULPS * _EPS[dt] * max(S) / h
            g = {"name": gname, "tensors": len(members), "derivative": fd, "applied": applied,
                 "error_estimate": est, "rounding_floor": floor, "rel_error": 0.0, "tolerance": tol, "h": h,
                 "decided_alike": True}
            if not all(math.isfinite(x) for x in (fd, applied, floor, est)):
                # nothing non-finite in the record: the group fails, its figures 0 (as longstraw-train)
                g.update(derivative=0.0, applied=0.0, error_estimate=0.0, rounding_floor=0.0, tolerance=0.0,
                         verdict="fail" if full else "reported", nonfinite=True)
            else:
                rel, gtol, ok, unresolved = judge(fd, applied, est, floor, tol)
                g.update(rel_error=rel, tolerance=gtol, unresolved=unresolved,
                         verdict="reported" if not full else "not_applicable" if unresolved else
                         "pass" if ok else "fail")
            out_groups.append(g)
            numbers += [g["derivative"], g["applied"], g["error_estimate"], g["rounding_floor"]]
    finally:
        with torch.no_grad():
            for n in names:
                P[n].copy_(saved[n])
    # every rank writes the same verdicts: a group fails when it fails on any rank, and the probe
    # fails when the ranks' numbers differ (a gradient the ranks did not agree on)
    agree = _ranks_agree(numbers, process_group)
    failed = _any_rank([g["verdict"] == "fail" for g in out_groups], process_group)
    reason = None
    for g, f in zip(out_groups, failed):
        if full and f and g["verdict"] != "fail":
            g["verdict"] = "fail"
        if reason is None and g["verdict"] == "fail":
            reason = g["name"] + (": a loss at the moved weights, or the applied gradient, is not finite"
                                  if g.get("nonfinite") else ": the applied gradient differs from the loss's derivative")
    unresolved = [g for g in out_groups if g.get("unresolved")]
    if reason is None and unresolved and full:
        u = unresolved[0]
        reason = (f"{u['name']}: the differences cannot resolve the derivative (error budget "
                  f"{(2 * u['rounding_floor'] + u['error_estimate']) / abs(u['derivative']):.3g} of it at h = "
                  f"{u['h']:.3g}): not judged")
    for g in out_groups:
        g.pop("nonfinite", None)
        g.pop("unresolved", None)
    if not agree:
        reason = (reason + "; " if reason else "") + "the ranks computed different numbers (their digests differ)"
    verdict = ("reported" if not full else "fail" if any(failed) or not agree else
               "not_applicable" if unresolved else "pass")
    fields.update(h=h, seed=seed, evaluations=evaluations, seconds=time.perf_counter() - t0, tol=tol,
                  verdict=verdict)
    if reason is not None and full:
        fields["reason"] = reason
    fields.update(ranks_agree=agree, groups=out_groups)
    if writer is not None:
        writer.gradient_probe(**fields)
    return fields
