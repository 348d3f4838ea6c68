#!/usr/bin/python3
"""Independent reference for the `mla` family (MLA + DeepSeek sparse attention + MoE).

Written from docs/model.md (sections 0, 2, 3, 4, 5, 6) only, not from the
trainer's or the kernels' code. Standard library only, so that Debian's /usr/bin/python3
runs it on a fresh machine. It shares no model code with hybrid_ref.py; it imports from it
only the safetensors reader/writer, the advantages, the section 4 loss and the generic
primitives (rows, matvec, sigmoid, silu, rmsnorm) and the option parser: hr.*.
Token by token: every layer keeps what a prompt carries (c_kv after its norm, k_pe after
RoPE, the indexer key k_I), the prompt runs once and every member continues from its own
copy of that state; no pages, chunks or attention merge.

usage:
  mla_ref.py WEIGHTS.safetensors BATCH.json --json OUT.json [--absorbed]
      WEIGHTS (docs/model.md section 5 names, F64 or F32; e.g. from --random-weights or the
      trainer's --save-init) and BATCH (a --dump-batch file, section 6, family mla).
      Writes {"policy": [[...]], "ref_policy": [[...]], "advantages": [...], "loss": X}
      exactly as hybrid_ref.py --json does: the token log-probs under (a) the policy, base
      weights + (alpha/r) B A on every LoRA target in the file, (b) the reference policy,
      base weights with the adapters off (train_mode lora; in train_mode full the step-0
      weights, i.e. (a)), the advantages of the batch's rewards and the section 4 loss from
      (a) and the batch's old_logprobs and ref_logprobs, and "decisions": the margins of every
      discrete decision both forwards made (class Margins: DSA top-k, MoE kept groups and
      experts; per kind the count and the smallest margin relative to its scale, with its
      layer, position and member), what longstraw-parity holds against the composition
      noise before it draws a verdict. LoRA pairs, when present, must be
      exactly the section 3 mla targets (routed experts' only with lora_experts). Floats are
      repr-exact. Attention uses the naive (per-head expanded) form; --absorbed the
      absorbed one (the same function, section 2.1).
  mla_ref.py --random-weights CONFIG.json OUT.safetensors [--seed N] [--lora-r R]
             [--lora-experts] [--lora-b-zero]
      Writes random F64 weights of the config under the section 5 names (norm weights and
      the indexer LayerNorm moved off 1/0, a non-zero router_bias), for the self-test and
      for `longstraw-train --load`. With --lora-r R also every LoRA pair of section 3
      (lora_A random, lora_B random unless --lora-b-zero; routed experts' with
      --lora-experts).
  mla_ref.py --self-test
      Proves internal properties on random weights of configs/mla-tiny.json (whose
      keys and section 2.4 values it checks first):
        (0) RoPE (interleaved, NeoX prefix), RMSNorm, LayerNorm, top-k: hand values;
        (a) absorbed and naive MLA agree (every layer's attention output and every
            log-probability, to 1e-12) with the top-k active;
        (b) DSA: with index_topk >= the sequence length the model equals dense causal
            attention; with the small top-k exactly min(k_top, t+1) positions s <= t are
            attended, the selection is ordered by score then index, attention depends on
            the selected positions only (every unselected cache entry changed: output
            bit-identical; each selected one: changed), constructed exact ties (one repeated
            token, two alternating tokens, with the indexer key made position-independent)
            pick the lowest indices, and the small top-k differs from dense (control);
        (c) MoE routing: kept groups are the topk_group best by the sum of their top-2 s',
            the experts the top-k of s' inside them, both by the tie rule (model routes
            and constructed ties, a case where group limiting excludes the best expert, a
            case where top-2 differs from the group sum), weights sum to rho and are
            rho s/sum(s) from s, not s' (router_bias selects but does not weigh);
        (d) the branch split (prompt once, copied state) equals each member's full
            sequence; LoRA: B = 0 gives policy == reference, random B does not; the --json
            and --random-weights modes end to end, with usage errors exiting 2.
      Each part is timed; about 5 s of one CPU on mla-tiny. The code is in
      mla_selftest.py (beside this file).

exit: 0 every check ran and agrees, 1 a mismatch or a missing input (named), 2 bad usage.
"""

import json
import math
import os
import random
import sys
from operator import mul

sys.dont_write_bytecode = True  # run from the source tree by ctest: leave no __pycache__ there
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hybrid_ref as hr  # noqa: E402  (safetensors I/O, advantages, GRPO loss, primitives, options only)

Usage, Mismatch = hr.Usage, hr.Mismatch
rows, matvec, sigmoid, silu, rmsnorm = hr.rows, hr.matvec, hr.sigmoid, hr.silu, hr.rmsnorm

MLA_KEYS = ("first_dense", "heads", "q_rank", "kv_rank", "d_nope", "d_rope", "d_v",
            "index_heads", "index_dim", "index_topk", "n_experts", "n_group", "topk_group",
            "experts_per_token", "expert_dim", "routed_scale")
MODEL_KEYS = ("family", "vocab", "d_model", "n_layers", "ffn_dim", "rms_eps", "rope_theta") + MLA_KEYS
RUN_KEYS = ("train_mode", "lora_r", "lora_alpha", "lora_experts", "grad_mode", "epsilon", "beta",
            "temperature")
ATTN_TARGETS = ("attn.q_a", "attn.q_b", "attn.kv_a", "attn.kv_b", "attn.o")
FFN_PARTS = ("gate", "up", "down")
NEG_INF = float("-inf")


# ----------------------------------------------------------------------------- primitives

def dot(a, b):
    return sum(map(mul, a, b))


def layernorm(x, gamma, beta, eps):
    n = len(x)
    mu = sum(x) / n
    var = sum((v - mu) ** 2 for v in x) / n
    r = 1.0 / math.sqrt(var + eps)
    return [g * (v - mu) * r + b for g, v, b in zip(gamma, x, beta)]


def rope_angles(pos, dr, theta):
    return [pos * theta ** (-2.0 * i / dr) for i in range(dr // 2)]


def rope_interleaved(x, pos, theta):
    """Pairs (2i, 2i+1) over all of x (len d_r)."""
    dr = len(x)
    y = list(x)
    for i, phi in enumerate(rope_angles(pos, dr, theta)):
        c, s = math.cos(phi), math.sin(phi)
        a, b = x[2 * i], x[2 * i + 1]
        y[2 * i] = a * c - b * s
        y[2 * i + 1] = a * s + b * c
    return y


def rope_neox_prefix(x, pos, dr, theta):
    """NeoX pairs (i, i + d_r/2) on the first d_r dims of x; the rest pass through."""
    half = dr // 2
    y = list(x)
    for i, phi in enumerate(rope_angles(pos, dr, theta)):
        c, s = math.cos(phi), math.sin(phi)
        a, b = x[i], x[i + half]
        y[i] = a * c - b * s
        y[i + half] = b * c + a * s
    return y


def topk(scores, k):
    """docs/model.md section 0: the k best indices by score descending, then index ascending."""
    for i, v in enumerate(scores):
        if v != v:
            raise Mismatch("top-k: score %d is NaN" % i)
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]


def swiglu(mlp, x):
    g = matvec(mlp[0], x)
    u = matvec(mlp[1], x)
    return matvec(mlp[2], [silu(a) * b for a, b in zip(g, u)])


def route(sp, n_group, topk_group, k):
    """Group-limited top-k over s' (section 2.3): (kept groups, expert indices)."""
    E = len(sp)
    gs = E // n_group
    gscore = [sum(sorted(sp[g * gs:(g + 1) * gs], reverse=True)[:2]) for g in range(n_group)]
    kept = topk(gscore, topk_group)
    keep = set(kept)
    masked = [sp[e] if e // gs in keep else NEG_INF for e in range(E)]
    return kept, topk(masked, k), gscore


# ----------------------------------------------------------------------------- model

def dims(cfg):
    try:
        D = {k: cfg[k] for k in MODEL_KEYS}
    except KeyError as e:
        raise Mismatch("config: key %s (docs/model.md section 6) missing" % e)
    if D["family"] != "mla":
        raise Usage("this reference covers family mla only, config has %r" % D["family"])
    ok = (D["d_rope"] % 2 == 0 and D["index_dim"] >= D["d_rope"] and D["n_experts"] % D["n_group"] == 0
          and 1 <= D["topk_group"] <= D["n_group"]
          and 1 <= D["experts_per_token"] <= D["topk_group"] * (D["n_experts"] // D["n_group"])
          and D["index_topk"] >= 1 and 0 <= D["first_dense"] <= D["n_layers"])
    if not ok:
        raise Mismatch("config: inconsistent mla dims %r" % D)
    return D


def lora_targets(D, lora_experts):
    out = []
    for i in range(D["n_layers"]):
        p = "layers.%d." % i
        out += [p + t for t in ATTN_TARGETS]
        if i < D["first_dense"]:
            out += [p + "mlp." + f for f in FFN_PARTS]
        else:
            out += [p + "moe.shared." + f for f in FFN_PARTS]
            if lora_experts:
                out += [p + "moe.experts.%d.%s" % (e, f) for e in range(D["n_experts"]) for f in FFN_PARTS]
    return out


def shapes(D):
    """name -> shape of every base tensor (section 5), and name -> [out, in] of every linear."""
    V, d, L = D["vocab"], D["d_model"], D["n_layers"]
    H, rq, rkv, dn, dr, dv = D["heads"], D["q_rank"], D["kv_rank"], D["d_nope"], D["d_rope"], D["d_v"]
    HI, dI, E, Ie, I = D["index_heads"], D["index_dim"], D["n_experts"], D["expert_dim"], D["ffn_dim"]
    lin = {"lm_head": [V, d]}
    vec = {"embed.weight": [V, d], "norm.weight": [d]}
    for i in range(L):
        p = "layers.%d." % i
        vec[p + "norm1.weight"] = [d]
        vec[p + "norm2.weight"] = [d]
        lin.update({p + "attn.q_a": [rq, d], p + "attn.q_b": [H * (dn + dr), rq],
                    p + "attn.kv_a": [rkv + dr, d], p + "attn.kv_b": [H * (dn + dv), rkv],
                    p + "attn.o": [d, H * dv], p + "indexer.q": [HI * dI, rq], p + "indexer.k": [dI, d],
                    p + "indexer.w": [HI, d]})
        vec.update({p + "attn.q_a_norm.weight": [rq], p + "attn.kv_a_norm.weight": [rkv],
                    p + "indexer.k_norm.weight": [dI], p + "indexer.k_norm.bias": [dI]})
        ffn = []
        if i < D["first_dense"]:
            ffn.append((p + "mlp.", I))
        else:
            lin[p + "moe.router"] = [E, d]
            vec[p + "moe.router_bias"] = [E]
            ffn += [(p + "moe.experts.%d." % e, Ie) for e in range(E)] + [(p + "moe.shared.", Ie)]
        for pre, n in ffn:
            lin.update({pre + "gate": [n, d], pre + "up": [n, d], pre + "down": [d, n]})
    return lin, vec


class Margins:
    """Every discrete decision of a forward (docs/model.md section 0's top-k): a DSA query's top-k of
    its visible keys, an MoE token's kept groups and its experts among them.  A decision's margin
    is the gap between the last value chosen and the best value not chosen (0 for an exact tie,
    which the index rule breaks; for a DSA tie at 0 between keys whose every head's q.k is
    negative, the smallest |q.k| / (|q| |k|) of them, since the tie holds until one crosses 0),
    its scale the largest |value| among the candidates; a decision
    with no value left out (k >= candidates) is not counted.  Per kind the smallest margin
    relative to its scale is kept with where it was made (layer, position, member or None for a
    prompt position)."""

    def __init__(self):
        self.kinds = {}

    def note(self, kind, values, k, where, clamp=None):
        vals = sorted((v for v in values if v != NEG_INF), reverse=True)
        if len(vals) <= k:
            return
        gap, scale = vals[k - 1] - vals[k], max(abs(v) for v in vals)
        rel = gap / scale if scale > 0 else 0.0
        if gap == 0 and vals[k] == 0 and clamp is not None:
            # an exact tie at 0 (the index rule breaks it): it holds while every tied value stays
            # clamped at 0; its margin is the nearest of those clamps to letting go
            tied = [c for v, c in zip(values, clamp) if v == 0]
            if tied and all(c is not None for c in tied):
                rel = min(tied)
                gap, scale = rel, 1.0
        got = self.kinds.setdefault(kind, {"count": 0, "smallest": None})
        got["count"] += 1
        if got["smallest"] is None or rel < got["smallest"]["relative"]:
            layer, pos, member = where
            got["smallest"] = {"relative": rel, "margin": gap, "scale": scale, "layer": layer,
                               "position": pos, "member": member}

    def doc(self):
        return {"count": sum(v["count"] for v in self.kinds.values()), "kinds": self.kinds}


class Model:
    def __init__(self, cfg, tensors, with_lora, lora_experts=None, absorbed=False, dense=False):
        D = dims(cfg)
        self.D = D
        self.eps = float(cfg["rms_eps"])
        self.theta = float(cfg["rope_theta"])
        self.absorbed, self.dense = absorbed, dense
        self.margins, self.where, self.member = None, None, None  # Margins, (layer, pos, member)
        self.t = tensors
        lin, vec = shapes(D)
        for name, shp in list(vec.items()) + [(n + ".weight", s) for n, s in lin.items()]:
            if name not in tensors:
                raise Mismatch("weights: tensor %s (docs/model.md section 5) missing" % name)
            if list(tensors[name][0]) != shp:
                raise Mismatch("weights: tensor %s has shape %r, config implies %r" % (name, tensors[name][0], shp))
        pairs = sorted(n[:-len(".lora_A")] for n in tensors if n.endswith(".lora_A"))
        for n in tensors:
            if n.endswith(".lora_B") and n[:-len(".lora_B")] not in pairs:
                raise Mismatch("weights: %s present without its lora_A" % n)
        if lora_experts is None:
            lora_experts = bool(cfg.get("lora_experts", False))
        if pairs:
            want = sorted(lora_targets(D, lora_experts))
            if pairs != want:
                extra, miss = sorted(set(pairs) - set(want)), sorted(set(want) - set(pairs))
                raise Mismatch("weights: the LoRA pairs are not the docs/model.md section 3 mla targets "
                               "(lora_experts %s): %s" % (lora_experts, ("not a target: %s" % extra[0]) if extra
                                                          else ("missing: %s" % miss[0])))
        self.lora_pairs = pairs
        r, alpha = cfg.get("lora_r"), cfg.get("lora_alpha")
        self.scale = float(alpha) / float(r) if (with_lora and pairs) else 0.0
        self.lora_r = r
        W = {n: self.linear(n, s, with_lora) for n, s in lin.items()}
        g = lambda n: list(tensors[n][1])  # noqa: E731
        self.embed = rows(*tensors["embed.weight"])
        self.lm_head = W["lm_head"]
        self.final_g = g("norm.weight")
        H, dn, dv, dqk = D["heads"], D["d_nope"], D["d_v"], D["d_nope"] + D["d_rope"]
        self.layers = []
        for i in range(D["n_layers"]):
            p = "layers.%d." % i
            kvb = W[p + "attn.kv_b"]
            lay = {"g1": g(p + "norm1.weight"), "g2": g(p + "norm2.weight"),
                   "q_a": W[p + "attn.q_a"], "q_a_norm": g(p + "attn.q_a_norm.weight"), "q_b": W[p + "attn.q_b"],
                   "kv_a": W[p + "attn.kv_a"], "kv_a_norm": g(p + "attn.kv_a_norm.weight"),
                   "W_UK": [kvb[h * (dn + dv):h * (dn + dv) + dn] for h in range(H)],
                   "W_UV": [kvb[h * (dn + dv) + dn:(h + 1) * (dn + dv)] for h in range(H)],
                   "o": W[p + "attn.o"], "iq": W[p + "indexer.q"], "ik": W[p + "indexer.k"],
                   "ikn_w": g(p + "indexer.k_norm.weight"), "ikn_b": g(p + "indexer.k_norm.bias"),
                   "iw": W[p + "indexer.w"], "moe": i >= D["first_dense"]}
            # W_UK_h^T for the absorbed form: [r_kv][d_n]
            lay["W_UK_T"] = [[[row[j] for row in lay["W_UK"][h]] for j in range(D["kv_rank"])] for h in range(H)]
            if lay["moe"]:
                lay["router"] = W[p + "moe.router"]
                lay["router_bias"] = g(p + "moe.router_bias")
                lay["experts"] = [tuple(W[p + "moe.experts.%d.%s" % (e, f)] for f in FFN_PARTS)
                                  for e in range(D["n_experts"])]
                lay["shared"] = tuple(W[p + "moe.shared." + f] for f in FFN_PARTS)
            else:
                lay["mlp"] = tuple(W[p + "mlp." + f] for f in FFN_PARTS)
            self.layers.append(lay)
        self.tau = dqk ** -0.5
        self.w_scale = D["index_heads"] ** -0.5 * D["index_dim"] ** -0.5

    def linear(self, name, shape, with_lora):
        Wb = rows(shape, self.t[name + ".weight"][1])
        an, bn = name + ".lora_A", name + ".lora_B"
        if an not in self.t:
            return Wb
        if bn not in self.t:
            raise Mismatch("weights: %s present without its lora_B" % an)
        out, inn = shape
        r = self.lora_r
        if not isinstance(r, int) or r < 1:
            raise Mismatch("config: lora_r %r with LoRA pairs in the weights" % (r,))
        if list(self.t[an][0]) != [r, inn] or list(self.t[bn][0]) != [out, r]:
            raise Mismatch("weights: %s %r / %s %r do not match lora_r=%r and [%d, %d]"
                           % (an, self.t[an][0], bn, self.t[bn][0], r, out, inn))
        if not with_lora:
            return Wb
        A, B, s = rows(*self.t[an]), rows(*self.t[bn]), self.scale
        AT = [[A[k][j] for k in range(r)] for j in range(inn)]
        return [[w + s * dot(B[o], AT[j]) for j, w in enumerate(Wb[o])] for o in range(out)]

    def new_state(self):
        return [{"ckv": [], "kpe": [], "kI": [], "exp": {}} for _ in self.layers]

    @staticmethod
    def copy_state(state):
        return [{"ckv": list(s["ckv"]), "kpe": list(s["kpe"]), "kI": list(s["kI"]), "exp": dict(s["exp"])}
                for s in state]

    # -- one token ----------------------------------------------------------------------
    def mla(self, lay, st, x, pos, rec):
        D, th = self.D, self.theta
        H, dn, dr, rkv = D["heads"], D["d_nope"], D["d_rope"], D["kv_rank"]
        HI, dI = D["index_heads"], D["index_dim"]
        if len(st["ckv"]) != pos:
            raise Mismatch("internal: cache holds %d positions at position %d" % (len(st["ckv"]), pos))
        cq = rmsnorm(matvec(lay["q_a"], x), lay["q_a_norm"], self.eps)
        q = matvec(lay["q_b"], cq)
        kv = matvec(lay["kv_a"], x)
        st["ckv"].append(rmsnorm(kv[:rkv], lay["kv_a_norm"], self.eps))
        st["kpe"].append(rope_interleaved(kv[rkv:], pos, th))
        # indexer: its key is always cached (carried state); the score only when selecting
        kI = rope_neox_prefix(layernorm(matvec(lay["ik"], x), lay["ikn_w"], lay["ikn_b"], 1e-6), pos, dr, th)
        st["kI"].append(kI)
        n = pos + 1
        if self.dense:
            sel = list(range(n))
        else:
            qI = matvec(lay["iq"], cq)
            qI = [rope_neox_prefix(qI[h * dI:(h + 1) * dI], pos, dr, th) for h in range(HI)]
            w = [v * self.w_scale for v in matvec(lay["iw"], x)]
            dots = [[dot(qI[h], ks) for h in range(HI)] for ks in st["kI"]]
            scores = [sum(w[h] * max(0.0, dk[h]) for h in range(HI)) for dk in dots]
            sel = topk(scores, min(D["index_topk"], n))
            if self.margins is not None:
                qn = [math.sqrt(dot(v, v)) for v in qI]
                # a score that is exactly 0 because every head's q.k is negative (ReLU) stays 0 until
                # one of them crosses 0: its margin is the smallest |q.k| relative to |q||k|
                clamp = [min(abs(dk[h]) / (qn[h] * math.sqrt(dot(ks, ks)) or 1.0) for h in range(HI))
                         if all(v <= 0 for v in dk) else None for dk, ks in zip(dots, st["kI"])]
                self.margins.note("dsa_topk", scores, D["index_topk"], self.where, clamp)
            if rec is not None:
                rec["sel"], rec["scores"] = list(sel), scores
        sel = sorted(sel)
        heads = []
        for h in range(H):
            qn, qp = q[h * (dn + dr):h * (dn + dr) + dn], q[h * (dn + dr) + dn:(h + 1) * (dn + dr)]
            qp = rope_interleaved(qp, pos, th)
            if self.absorbed:
                qh = matvec(lay["W_UK_T"][h], qn)
                z = [self.tau * (dot(qh, st["ckv"][s]) + dot(qp, st["kpe"][s])) for s in sel]
            else:
                z = [self.tau * (dot(qn, self.expand(lay, st, s)[0][h]) + dot(qp, st["kpe"][s])) for s in sel]
            m = max(z)
            e = [math.exp(v - m) for v in z]
            tot = sum(e)
            P = [v / tot for v in e]
            if self.absorbed:
                ob = [sum(p * st["ckv"][s][j] for p, s in zip(P, sel)) for j in range(rkv)]
                heads.extend(matvec(lay["W_UV"][h], ob))
            else:
                vs = [self.expand(lay, st, s)[1][h] for s in sel]
                heads.extend(sum(p * v[j] for p, v in zip(P, vs)) for j in range(D["d_v"]))
        out = matvec(lay["o"], heads)
        if rec is not None:
            rec["attn"] = out
        return out

    def expand(self, lay, st, s):
        """Naive form: per head k_nope = W_UK_h c_kv,s and v = W_UV_h c_kv,s (memoised)."""
        got = st["exp"].get(s)
        if got is None:
            c = st["ckv"][s]
            got = ([matvec(Wk, c) for Wk in lay["W_UK"]], [matvec(Wv, c) for Wv in lay["W_UV"]])
            st["exp"][s] = got
        return got

    def ffn(self, lay, x, rec):
        if not lay["moe"]:
            return swiglu(lay["mlp"], x)
        D = self.D
        s = [sigmoid(v) for v in matvec(lay["router"], x)]
        sp = [a + b for a, b in zip(s, lay["router_bias"])]
        kept, idx, gscore = route(sp, D["n_group"], D["topk_group"], D["experts_per_token"])
        if self.margins is not None:
            self.margins.note("moe_group", gscore, D["topk_group"], self.where)
            gs, keep = D["n_experts"] // D["n_group"], set(kept)
            self.margins.note("moe_expert", [sp[e] for e in range(len(sp)) if e // gs in keep],
                              D["experts_per_token"], self.where)
        den = sum(s[e] for e in idx) + 1e-20
        w = [D["routed_scale"] * s[e] / den for e in idx]
        y = [0.0] * D["d_model"]
        for wk, e in zip(w, idx):
            y = [a + wk * b for a, b in zip(y, swiglu(lay["experts"][e], x))]
        y = [a + b for a, b in zip(y, swiglu(lay["shared"], x))]
        if rec is not None:
            rec.update({"s": s, "sp": sp, "kept": kept, "idx": idx, "w": w, "gscore": gscore})
        return y

    def step(self, state, tok, pos, trace=None):
        """Token `tok` at absolute position `pos` through every block; extends `state`.
        With `trace` (a list), appends one record per layer: selection, attention output, routing."""
        h = list(self.embed[tok])
        for li, (lay, st) in enumerate(zip(self.layers, state)):
            self.where = (li, pos, self.member)
            rec = {"layer": li, "pos": pos} if trace is not None else None
            y = self.mla(lay, st, rmsnorm(h, lay["g1"], self.eps), pos, rec)
            h = [a + b for a, b in zip(h, y)]
            y = self.ffn(lay, rmsnorm(h, lay["g2"], self.eps), rec)
            h = [a + b for a, b in zip(h, y)]
            if rec is not None:
                trace.append(rec)
        return h

    def logprob(self, h, target, temperature):
        logits = [v / temperature for v in matvec(self.lm_head, rmsnorm(h, self.final_g, self.eps))]
        m = max(logits)
        return logits[target] - m - math.log(sum(math.exp(v - m) for v in logits))

    def sequence_logprobs(self, tokens, temperature=1.0, trace=None):
        """One sequence from position 0: the log-prob of tokens[t+1] given tokens[0..t]."""
        st = self.new_state()
        out = []
        for pos in range(len(tokens) - 1):
            out.append(self.logprob(self.step(st, tokens[pos], pos, trace), tokens[pos + 1], temperature))
        return out

    def group_logprobs(self, prompt, responses, temperature):
        """Section 4 branch split: the prompt x_0..x_{P-2} once; every member from a copy of
        that state with [x_{P-1}, y_0, ..., y_{R-2}] at positions P-1 ... scoring y_0 ... y_{R-1}."""
        P = len(prompt)
        state = self.new_state()
        for pos in range(P - 1):
            self.step(state, prompt[pos], pos)
        out = []
        for i, y in enumerate(responses):
            self.member = i
            st = self.copy_state(state)
            lp = []
            for t, tok in enumerate([prompt[P - 1]] + list(y[:-1])):
                lp.append(self.logprob(self.step(st, tok, P - 1 + t), y[t], temperature))
            out.append(lp)
        self.member = None
        return out


# ----------------------------------------------------------------------------- files

def random_weights(cfg, seed, lora_r=None, lora_experts=False, lora_b_zero=False):
    """name -> (shape, values): every section 5 tensor, uniform with unit output variance for
    the linears, norm gammas 1 +- 0.2, the indexer LayerNorm off (1, 0), router_bias +- 0.1."""
    D = dims(cfg)
    rng = random.Random(seed)

    def U(n, a, centre=0.0):
        return [centre + a * (2.0 * rng.random() - 1.0) for _ in range(n)]
    lin, vec = shapes(D)
    T = {}
    for name in sorted(vec):
        shp = vec[name]
        n = 1
        for s in shp:
            n *= s
        if name == "embed.weight":
            T[name] = (shp, U(n, 1.0))
        elif name.endswith(("k_norm.bias", "router_bias")):
            T[name] = (shp, U(n, 0.1))
        else:
            T[name] = (shp, U(n, 0.2, 1.0))
    for name in sorted(lin):
        out, inn = lin[name]
        T[name + ".weight"] = ([out, inn], U(out * inn, math.sqrt(3.0 / inn)))
    if lora_r:
        for name in sorted(lora_targets(D, lora_experts)):
            out, inn = lin[name]
            T[name + ".lora_A"] = ([lora_r, inn], U(lora_r * inn, math.sqrt(3.0 / inn)))
            T[name + ".lora_B"] = ([out, lora_r], [0.0] * (out * lora_r) if lora_b_zero else U(out * lora_r, 0.1))
    return T


def write_random_weights(cfg_path, out_path, seed, lora_r, lora_experts, lora_b_zero):
    cfg = read_json(cfg_path, "config")
    T = random_weights(cfg, seed, lora_r, lora_experts, lora_b_zero)
    tmp = out_path + ".tmp"
    meta = {"content": "weights", "family": "mla", "seed": str(seed),
            "config": json.dumps({k: cfg[k] for k in MODEL_KEYS}, sort_keys=True, separators=(",", ":")),
            "note": "mla_ref.py --random-weights"}
    hr.write_safetensors(tmp, T, "F64", meta)
    os.replace(tmp, out_path)
    return T


def read_json(path, what):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise Usage("cannot read %s %s: %s" % (what, path, e))
    if not isinstance(doc, dict):
        raise Usage("%s %s: not a JSON object" % (what, path))
    return doc


def load_batch(path):
    """A --dump-batch file of family mla: every section 6 key present and consistently sized."""
    batch = read_json(path, "batch")
    for key in hr.BATCH_KEYS:
        if key not in batch:
            raise Mismatch("batch %s: key %r (docs/model.md section 6) missing" % (path, key))
    cfg = batch["config"]
    if not isinstance(cfg, dict):
        raise Mismatch("batch %s: config is not an object" % path)
    if cfg.get("family") != "mla":
        raise Usage("this reference covers family mla only, batch %s has %r" % (path, cfg.get("family")))
    for key in MODEL_KEYS + RUN_KEYS:
        if key not in cfg:
            raise Mismatch("batch %s config: key %r (docs/model.md section 6) missing" % (path, key))
    if cfg["train_mode"] not in ("lora", "full"):
        raise Mismatch("batch %s config: train_mode %r" % (path, cfg["train_mode"]))
    prompt, responses = batch["prompt"], batch["responses"]
    G = len(responses)
    if G == 0 or any(len(batch[k]) != G for k in ("rewards", "advantages", "old_logprobs", "ref_logprobs")):
        raise Mismatch("batch %s: %d responses but rewards/advantages/old/ref of other lengths" % (path, G))
    if len(prompt) < 1:
        raise Mismatch("batch %s: empty prompt" % path)
    for i, y in enumerate(responses):
        if len(y) < 1 or len(batch["old_logprobs"][i]) != len(y) or len(batch["ref_logprobs"][i]) != len(y):
            raise Mismatch("batch %s: member %d has %d tokens and other old/ref log-prob counts" % (path, i, len(y)))
        for tok in list(prompt) + list(y):
            if not (isinstance(tok, int) and 0 <= tok < cfg["vocab"]):
                raise Mismatch("batch %s: member %d token %r outside the vocabulary" % (path, i, tok))
    return batch


def compute(weights_path, batch, absorbed=False):
    """(policy, reference-policy) log-probs of the batch's responses under one weights file."""
    tensors, _ = hr.read_safetensors(weights_path)
    cfg = batch["config"]
    temp = float(cfg["temperature"])
    prompt, responses = list(batch["prompt"]), [list(y) for y in batch["responses"]]
    margins = Margins()
    pol_model = Model(cfg, tensors, with_lora=True, absorbed=absorbed)
    pol_model.margins = margins
    policy = pol_model.group_logprobs(prompt, responses, temp)
    if cfg["train_mode"] == "lora" and pol_model.lora_pairs:
        ref_model = Model(cfg, tensors, with_lora=False, absorbed=absorbed)
        ref_model.margins = margins
        ref = ref_model.group_logprobs(prompt, responses, temp)
    else:  # train_mode full: the reference is the step-0 weights, i.e. the policy at step 1
        ref = policy
    return policy, ref, margins


def write_json(weights_path, batch_path, out_path, absorbed=False):
    batch = load_batch(batch_path)
    policy, ref, margins = compute(weights_path, batch, absorbed)
    cfg = batch["config"]
    adv = hr.advantages([float(r) for r in batch["rewards"]])
    loss, _ = hr.grpo_loss(policy, batch["old_logprobs"], batch["ref_logprobs"], adv,
                           float(cfg["epsilon"]), float(cfg["beta"]))
    doc = {"policy": policy, "ref_policy": ref, "advantages": adv, "loss": loss, "decisions": margins.doc()}
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, out_path)
    return doc


# ----------------------------------------------------------------------------- CLI

def main(argv):
    args = argv[1:]
    try:
        if args in (["-h"], ["--help"]):
            print(__doc__)
            return 0
        if args and args[0] == "--self-test":
            if len(args) != 1:
                raise Usage("--self-test takes no arguments")
            import mla_selftest  # the self-test lives beside this file
            mla_selftest.self_test()
            return 0
        if args and args[0] == "--random-weights":
            opt = {"--seed": "1", "--lora-r": None}
            flags = {"--lora-experts": False, "--lora-b-zero": False}
            pos = hr.parse_args(args[1:], opt, flags)
            if len(pos) != 2:
                raise Usage("--random-weights CONFIG.json OUT.safetensors [--seed N] [--lora-r R]")
            try:
                seed = int(opt["--seed"])
                r = None if opt["--lora-r"] is None else int(opt["--lora-r"])
            except ValueError:
                raise Usage("--seed and --lora-r take integers")
            if r is not None and r < 1:
                raise Usage("--lora-r %d: must be at least 1" % r)
            if (flags["--lora-experts"] or flags["--lora-b-zero"]) and r is None:
                raise Usage("--lora-experts and --lora-b-zero need --lora-r")
            T = write_random_weights(pos[0], pos[1], seed, r, flags["--lora-experts"], flags["--lora-b-zero"])
            print("mla_ref: %d tensors -> %s" % (len(T), pos[1]))
            return 0
        opt, flags = {"--json": None}, {"--absorbed": False}
        pos = hr.parse_args(args, opt, flags)
        out, absorbed = opt["--json"], flags["--absorbed"]
        if len(pos) != 2:
            raise Usage("expected WEIGHTS.safetensors BATCH.json --json OUT.json")
        if out is None:
            raise Usage("--json OUT.json is required (this reference writes, the parity tool compares)")
        write_json(pos[0], pos[1], out, absorbed)
        return 0
    except Usage as e:
        sys.stderr.write("mla_ref: usage error: %s\n(mla_ref.py --help for the usage)\n" % e)
        return 2
    except Mismatch as e:
        sys.stderr.write("mla_ref: FAIL: %s\n" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
