#!/usr/bin/python3
"""Independent reference for the `hybrid` family and the GRPO step.

Written from docs/model.md (sections 0, 1, 3, 4, 5, 6) only, not from the
trainer's code. Standard library only (json, struct, math, re), so that Debian's
/usr/bin/python3 runs it on a fresh machine. run_hybrid_ref.py drives it (ctest
hybrid_reference); it can also check one run by hand:

usage:
  hybrid_ref.py WEIGHTS.safetensors BATCH.json --loss-from LOG [--old-from ROLLOUTS.jsonl]
                [--require-perturbed-norms]
      WEIGHTS from `longstraw-train --save-init`, BATCH from `--dump-batch`, LOG the
      trainer's stdout (its "  exact loss X (last step)" line; run with --steps 1).
      Recomputes, token by token with a recurrent GDN state and one growing KV list
      (the prompt once, then every member from a copy of its state), the token log-probs
      under
        (a) the policy: base weights + (alpha/r) B A on every LoRA target in the file,
        (b) the reference policy: base weights with the adapters off (train_mode lora;
            in train_mode full the reference is the step-0 weights, i.e. (a)),
      and checks: old_logprobs == (a) (or, with --old-from, == the supplied ones),
      ref_logprobs == (b), the advantages, and the loss of docs/model.md section 4 computed
      from (a), the old and (b) log-probs against the trainer's. Every check runs and is
      counted; an input that is missing fails the run.
      --require-perturbed-norms fails unless some RMSNorm weight is off its initial
      value (so a run that was meant to load perturbed norms really did).
  hybrid_ref.py WEIGHTS.safetensors BATCH.json --json OUT.json
      Compares nothing: writes what the reference computes for longstraw-parity to
      compare, {"policy": [[...]], "ref_policy": [[...]], "advantages": [...],
      "loss": X}, the log-probs (a) and (b) above per member and token, the advantages
      of the batch's rewards, and the loss of docs/model.md section 4 from (a) and the
      batch's old_logprobs and ref_logprobs (as supplied to the run: the parity runs
      supply both), and "decisions": {"count": 0, "kinds": {}} (this family makes no
      discrete decision). Floats are repr-exact.
  hybrid_ref.py --perturb-norms IN.safetensors OUT.safetensors [SEED]
      Writes a copy of IN with every RMSNorm weight (norm1, norm2, norm, q_norm,
      k_norm, gdn.norm) moved off its initial value, for `longstraw-train --load`,
      so that zero-centred (1+w) versus standard (w) gammas are actually exercised.

exit: 0 every check ran and agrees, 1 a mismatch, a missing input or a skipped check
(named), 2 bad usage.
"""

import json
import math
import os
import re
import struct
import sys
from operator import mul

LORA_TARGETS = ("attn.q", "attn.k", "attn.v", "attn.o",
                "gdn.in_qkv", "gdn.in_z", "gdn.out",
                "mlp.gate", "mlp.up", "mlp.down")


class Usage(Exception):
    pass


class Mismatch(Exception):
    pass


# ----------------------------------------------------------------------------- I/O

def read_safetensors(path):
    """Return (tensors, dtype) where tensors maps name -> (shape, flat list of floats)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise Usage("cannot read %s: %s" % (path, e))
    if len(raw) < 8:
        raise Usage("%s: too short for safetensors" % path)
    (hlen,) = struct.unpack("<Q", raw[:8])
    if 8 + hlen > len(raw):
        raise Usage("%s: header length %d past end of file" % (path, hlen))
    try:
        header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise Usage("%s: bad JSON header: %s" % (path, e))
    base = 8 + hlen
    tensors = {}
    dtypes = set()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info.get("dtype")
        if dt == "F64":
            fmt, size = "d", 8
        elif dt == "F32":
            fmt, size = "f", 4
        else:
            raise Usage("%s: tensor %s has dtype %r (only F64/F32 supported)" % (path, name, dt))
        dtypes.add(dt)
        shape = [int(s) for s in info["shape"]]
        a, b = info["data_offsets"]
        n = 1
        for s in shape:
            n *= s
        if b - a != n * size or base + b > len(raw):
            raise Usage("%s: tensor %s: data_offsets %r do not fit shape %r" % (path, name, (a, b), shape))
        vals = list(struct.unpack("<%d%s" % (n, fmt), raw[base + a:base + b]))
        tensors[name] = (shape, vals)
    return tensors, (dtypes.pop() if len(dtypes) == 1 else "mixed")


def write_safetensors(path, tensors, dtype, metadata=None):
    fmt, size = ("d", 8) if dtype == "F64" else ("f", 4)
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    off = 0
    names = sorted(tensors)
    for name in names:
        shape, vals = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(vals) * size]}
        off += len(vals) * size
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for name in names:
            vals = tensors[name][1]
            f.write(struct.pack("<%d%s" % (len(vals), fmt), *vals))


# ----------------------------------------------------------------------------- math

def rows(shape, vals):
    """[out, in] flat -> list of rows."""
    o, i = shape
    return [vals[r * i:(r + 1) * i] for r in range(o)]


def matvec(W, x):
    return [sum(map(mul, row, x)) for row in W]


def sigmoid(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def silu(x):
    return x * sigmoid(x)


def softplus(x):
    # log(1 + e^x), stable
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def rmsnorm(x, gamma, eps):
    """y = gamma * x * (mean x^2 + eps)^-1/2."""
    r = (sum(v * v for v in x) / len(x) + eps) ** -0.5
    return [g * v * r for g, v in zip(gamma, x)]


def log_softmax_at(logits, idx):
    m = max(logits)
    return logits[idx] - m - math.log(sum(math.exp(v - m) for v in logits))


# ----------------------------------------------------------------------------- model

class Model:
    def __init__(self, cfg, tensors, with_lora):
        self.cfg = cfg
        self.V = cfg["vocab"]
        self.d = cfg["d_model"]
        self.L = cfg["n_layers"]
        self.I = cfg["ffn_dim"]
        self.eps = float(cfg["rms_eps"])
        self.theta = float(cfg["rope_theta"])
        self.Hk, self.Hv = cfg["gdn_hk"], cfg["gdn_hv"]
        self.dk, self.dv = cfg["gdn_dk"], cfg["gdn_dv"]
        self.K = cfg["conv_kernel"]
        self.H, self.Hkv = cfg["attn_heads"], cfg["attn_kv_heads"]
        self.hd, self.dr = cfg["head_dim"], cfg["rope_dim"]
        if self.Hv % self.Hk or self.H % self.Hkv or self.dr % 2 or self.dr > self.hd:
            raise Mismatch("config: inconsistent head dims %r" % cfg)
        self.C = 2 * self.Hk * self.dk + self.Hv * self.dv
        r = cfg.get("lora_r")
        alpha = cfg.get("lora_alpha")
        self.t = tensors
        self.with_lora = with_lora
        self.scale = (float(alpha) / float(r)) if (with_lora and r) else 0.0
        self.lora_r = r

        d, I, C = self.d, self.I, self.C
        shp, vals = self.need("embed.weight", [self.V, d])
        self.embed = rows(shp, vals)
        self.lm_head = self.linear("lm_head", [self.V, d], lora_ok=False)
        self.final_g = self.gamma0("norm.weight", d)
        self.layers = []
        for i in range(self.L):
            p = "layers.%d." % i
            lay = {"attn": (i + 1) % 4 == 0,
                   "g1": self.gamma0(p + "norm1.weight", d),
                   "g2": self.gamma0(p + "norm2.weight", d),
                   "gate": self.linear(p + "mlp.gate", [I, d]),
                   "up": self.linear(p + "mlp.up", [I, d]),
                   "down": self.linear(p + "mlp.down", [d, I])}
            if lay["attn"]:
                H, Hkv, hd = self.H, self.Hkv, self.hd
                lay["q"] = self.linear(p + "attn.q", [H * 2 * hd, d])
                lay["k"] = self.linear(p + "attn.k", [Hkv * hd, d])
                lay["v"] = self.linear(p + "attn.v", [Hkv * hd, d])
                lay["o"] = self.linear(p + "attn.o", [d, H * hd])
                lay["qn"] = self.gamma0(p + "attn.q_norm.weight", hd)
                lay["kn"] = self.gamma0(p + "attn.k_norm.weight", hd)
            else:
                Hv, dv = self.Hv, self.dv
                lay["in_qkv"] = self.linear(p + "gdn.in_qkv", [C, d])
                lay["in_z"] = self.linear(p + "gdn.in_z", [Hv * dv, d])
                lay["in_b"] = self.linear(p + "gdn.in_b", [Hv, d], lora_ok=False)
                lay["in_a"] = self.linear(p + "gdn.in_a", [Hv, d], lora_ok=False)
                lay["out"] = self.linear(p + "gdn.out", [d, Hv * dv])
                cs, cv = self.need(p + "gdn.conv.weight", [C, self.K])
                lay["conv"] = rows(cs, cv)
                A_log = self.need(p + "gdn.A_log", [Hv])[1]
                lay["negA"] = [-math.exp(a) for a in A_log]
                lay["dt_bias"] = self.need(p + "gdn.dt_bias", [Hv])[1]
                lay["gn"] = list(self.need(p + "gdn.norm.weight", [dv])[1])  # standard gamma = w
            self.layers.append(lay)

    def need(self, name, shape):
        if name not in self.t:
            raise Mismatch("weights: tensor %s (docs/model.md section 5) missing" % name)
        shp, vals = self.t[name]
        if list(shp) != list(shape):
            raise Mismatch("weights: tensor %s has shape %r, config implies %r" % (name, shp, shape))
        return shp, vals

    def gamma0(self, name, n):
        """zero-centred RMSNorm gamma = 1 + w."""
        return [1.0 + w for w in self.need(name, [n])[1]]

    def linear(self, name, shape, lora_ok=True):
        shp, vals = self.need(name + ".weight", shape)
        W = rows(shp, vals)
        an, bn = name + ".lora_A", name + ".lora_B"
        has = (an in self.t, bn in self.t)
        if has[0] != has[1]:
            raise Mismatch("weights: %s present without its partner" % (an if has[0] else bn))
        if not has[0]:
            return W
        if not lora_ok:
            raise Mismatch("weights: %s is not a LoRA target of the hybrid family (docs/model.md section 3)" % name)
        out, inn = shape
        r = self.lora_r
        As, Av = self.t[an]
        Bs, Bv = self.t[bn]
        if list(As) != [r, inn] or list(Bs) != [out, r]:
            raise Mismatch("weights: %s %r / %s %r do not match lora_r=%r and [%d, %d]"
                           % (an, As, bn, Bs, r, out, inn))
        if not self.with_lora:
            return W
        s = self.scale
        A = rows(As, Av)
        Bm = rows(Bs, Bv)
        Weff = []
        for o in range(out):
            brow = Bm[o]
            row = list(W[o])
            for k in range(r):
                c = s * brow[k]
                if c != 0.0:
                    Ak = A[k]
                    for j in range(inn):
                        row[j] += c * Ak[j]
            Weff.append(row)
        return Weff

    # -- token by token ---------------------------------------------------------------
    def new_state(self):
        """Empty carried state: no keys/values, zero conv history, zero GDN state."""
        state = []
        for lay in self.layers:
            if lay["attn"]:
                state.append({"K": [[] for _ in range(self.Hkv)], "V": [[] for _ in range(self.Hkv)]})
            else:
                state.append({"hist": [[0.0] * self.C for _ in range(self.K - 1)],
                              "S": [[[0.0] * self.dv for _ in range(self.dk)] for _ in range(self.Hv)]})
        return state

    @staticmethod
    def copy_state(state):
        out = []
        for st in state:
            if "K" in st:
                out.append({"K": [list(k) for k in st["K"]], "V": [list(v) for v in st["V"]]})
            else:
                out.append({"hist": [list(m) for m in st["hist"]],
                            "S": [[list(r) for r in S] for S in st["S"]]})
        return out

    def step(self, state, tok, pos):
        """Run token `tok` at absolute position `pos` through every block; returns the
        final hidden vector (before the final norm) and extends `state`."""
        h = list(self.embed[tok])
        for lay, st in zip(self.layers, state):
            x = rmsnorm(h, lay["g1"], self.eps)
            y = self.attn_step(lay, st, x, pos) if lay["attn"] else self.gdn_step(lay, st, x)
            h = [a + b for a, b in zip(h, y)]
            x = rmsnorm(h, lay["g2"], self.eps)
            g = matvec(lay["gate"], x)
            u = matvec(lay["up"], x)
            y = matvec(lay["down"], [silu(a) * b for a, b in zip(g, u)])
            h = [a + b for a, b in zip(h, y)]
        return h

    def token_logprob(self, h, target, temperature):
        hn = rmsnorm(h, self.final_g, self.eps)
        logits = [v / temperature for v in matvec(self.lm_head, hn)]
        return log_softmax_at(logits, target)

    def group_logprobs(self, prompt, responses, temperature):
        """log-probs of every response token given the prompt and the tokens before it.
        The prompt x_0..x_{P-2} runs once, token by token; every member then continues
        from its own copy of that state with x_{P-1}, y_0, ... (the Python has no pages,
        no chunks and no attention merge: one growing KV list and one GDN state)."""
        P = len(prompt)
        state = self.new_state()
        for pos in range(P - 1):
            self.step(state, prompt[pos], pos)
        out = []
        for y in responses:
            st = self.copy_state(state)
            inputs = [prompt[P - 1]] + list(y[:-1])
            lp = []
            for t, tok in enumerate(inputs):
                h = self.step(st, tok, P - 1 + t)
                lp.append(self.token_logprob(h, y[t], temperature))
            out.append(lp)
        return out

    def gdn_step(self, lay, st, x):
        Hk, Hv, dk, dv, K = self.Hk, self.Hv, self.dk, self.dv, self.K
        m = matvec(lay["in_qkv"], x)
        z = matvec(lay["in_z"], x)
        b = matvec(lay["in_b"], x)
        a = matvec(lay["in_a"], x)
        # 2. causal depthwise conv over [m_{t-K+1} .. m_t], then SiLU
        window = st["hist"] + [m]
        conv = lay["conv"]
        c = [silu(sum(conv[ch][j] * window[j][ch] for j in range(K))) for ch in range(self.C)]
        st["hist"] = window[1:]
        # 3. split q | k | v, head-major
        nq = Hk * dk
        qs = [c[h * dk:(h + 1) * dk] for h in range(Hk)]
        ks = [c[nq + h * dk:nq + (h + 1) * dk] for h in range(Hk)]
        vs = [c[2 * nq + j * dv:2 * nq + (j + 1) * dv] for j in range(Hv)]
        # 4. L2 normalise per head, scale q by dk^-1/2
        qscale = dk ** -0.5
        for h in range(Hk):
            rq = (sum(v * v for v in qs[h]) + 1e-6) ** -0.5
            rk = (sum(v * v for v in ks[h]) + 1e-6) ** -0.5
            qs[h] = [v * rq * qscale for v in qs[h]]
            ks[h] = [v * rk for v in ks[h]]
        group = Hv // Hk
        ys = []
        for j in range(Hv):
            # 5.
            beta = sigmoid(b[j])
            g = lay["negA"][j] * softplus(a[j] + lay["dt_bias"][j])
            eg = math.exp(g)
            kh = j // group
            q, k, v = qs[kh], ks[kh], vs[j]
            S = st["S"][j]
            # 6. S^ = e^g S ; u = S^T k ; delta = beta (v - u) ; S = S^ + k delta^T ; o = S^T q~
            S = [[eg * e for e in row] for row in S]
            u = [0.0] * dv
            for r in range(dk):
                kr = k[r]
                row = S[r]
                u = [uu + kr * e for uu, e in zip(u, row)]
            delta = [beta * (vv - uu) for vv, uu in zip(v, u)]
            S = [[e + k[r] * dl for e, dl in zip(S[r], delta)] for r in range(dk)]
            st["S"][j] = S
            o = [0.0] * dv
            for r in range(dk):
                qr = q[r]
                o = [oo + qr * e for oo, e in zip(o, S[r])]
            # 7. gated norm: gamma * RMSNorm(o) * silu(z_j)
            yn = rmsnorm(o, lay["gn"], self.eps)
            zj = z[j * dv:(j + 1) * dv]
            ys.extend(yy * silu(zz) for yy, zz in zip(yn, zj))
        return matvec(lay["out"], ys)

    def rope(self, x, pos):
        dr = self.dr
        half = dr // 2
        y = list(x)
        for i in range(half):
            phi = pos * self.theta ** (-2.0 * i / dr)
            cs, sn = math.cos(phi), math.sin(phi)
            a, b = x[i], x[i + half]
            y[i] = a * cs - b * sn
            y[i + half] = b * cs + a * sn
        return y

    def attn_step(self, lay, st, x, pos):
        H, Hkv, hd = self.H, self.Hkv, self.hd
        qg = matvec(lay["q"], x)
        kk = matvec(lay["k"], x)
        vv = matvec(lay["v"], x)
        for h in range(Hkv):
            kh = rmsnorm(kk[h * hd:(h + 1) * hd], lay["kn"], self.eps)
            st["K"][h].append(self.rope(kh, pos))
            st["V"][h].append(vv[h * hd:(h + 1) * hd])
        tau = hd ** -0.5
        group = H // Hkv
        cat = []
        for h in range(H):
            q = qg[h * 2 * hd:h * 2 * hd + hd]
            gate = qg[h * 2 * hd + hd:(h + 1) * 2 * hd]
            q = self.rope(rmsnorm(q, lay["qn"], self.eps), pos)
            kvh = h // group
            Ks, Vs = st["K"][kvh], st["V"][kvh]
            zs = [tau * sum(map(mul, q, k)) for k in Ks]
            mz = max(zs)
            ps = [math.exp(z - mz) for z in zs]
            tot = sum(ps)
            o = [0.0] * hd
            for p_, v in zip(ps, Vs):
                w = p_ / tot
                o = [oo + w * e for oo, e in zip(o, v)]
            cat.extend(oo * sigmoid(gg) for oo, gg in zip(o, gate))
        return matvec(lay["o"], cat)


# ----------------------------------------------------------------------------- checks

def advantages(rewards):
    """docs/model.md section 4: (r - mean) / (std + 1e-4), std with Bessel's correction; G = 1 gives 0."""
    G = len(rewards)
    if G == 1:
        return [0.0]
    mean = sum(rewards) / G
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (G - 1))
    return [(r - mean) / (std + 1e-4) for r in rewards]


def grpo_loss(lp, old, ref, adv, eps, beta):
    """docs/model.md section 4 loss. Returns (loss, census): census counts the tokens by which
    branch of min(rho A, clip(rho) A) is taken:
      clip_pos  A > 0, rho > 1+eps  (clipped value taken, zero ratio gradient)
      clip_neg  A < 0, rho < 1-eps  (clipped value taken)
      open_pos  A > 0, rho < 1-eps  (bound crossed but the unclipped value is the min)
      open_neg  A < 0, rho > 1+eps  (same, other sign)
      inside    1-eps <= rho <= 1+eps, or A = 0"""
    census = {"clip_pos": 0, "clip_neg": 0, "open_pos": 0, "open_neg": 0, "inside": 0}
    G = len(lp)
    total = 0.0
    max_kl = 0.0
    for i in range(G):
        A = adv[i]
        s = 0.0
        for t in range(len(lp[i])):
            rho = math.exp(lp[i][t] - old[i][t])
            clipped = min(max(rho, 1.0 - eps), 1.0 + eps)
            d = ref[i][t] - lp[i][t]
            kl = math.exp(d) - d - 1.0
            max_kl = max(max_kl, kl)
            s += -min(rho * A, clipped * A) + beta * kl
            if A > 0 and rho > 1.0 + eps:
                census["clip_pos"] += 1
            elif A < 0 and rho < 1.0 - eps:
                census["clip_neg"] += 1
            elif A > 0 and rho < 1.0 - eps:
                census["open_pos"] += 1
            elif A < 0 and rho > 1.0 + eps:
                census["open_neg"] += 1
            else:
                census["inside"] += 1
        total += s / len(lp[i])
    census["max_kl"] = max_kl
    return total / G, census


LOSS_LINE = re.compile(r"^  exact loss (\S+) \(last step\)$")


def trainer_loss(log_path):
    """The loss longstraw-train prints on its summary ("  exact loss %.17g (last step)")."""
    try:
        with open(log_path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise Mismatch("trainer loss: cannot read %s: %s" % (log_path, e))
    found = [m.group(1) for m in map(LOSS_LINE.match, lines) if m]
    if len(found) != 1:
        raise Mismatch("trainer loss: %s has %d lines '  exact loss X (last step)', expected 1 "
                       "(did the trainer's summary change?)" % (log_path, len(found)))
    try:
        v = float(found[0])
    except ValueError:
        raise Mismatch("trainer loss: %s: %r is not a number" % (log_path, found[0]))
    if not math.isfinite(v):
        raise Mismatch("trainer loss: %s: %r is not finite" % (log_path, found[0]))
    return v


class Checks:
    """Every comparison made, counted. A check whose input is missing raises Mismatch
    (never skipped); a check that runs and disagrees is recorded and reported at the end."""

    def __init__(self):
        self.ran = 0
        self.failures = []

    def values(self, name, mine, theirs, tol, relative=False, labels=None):
        """Compare two equally shaped lists of lists (or flat lists) of numbers; the error is
        |diff|, or with relative |diff| / max(1, |reference|)."""
        def flat(x, where):
            if isinstance(x, (list, tuple)):
                out = []
                for j, e in enumerate(x):
                    out.extend(flat(e, where + [j]))
                return out
            try:
                return [(where, float(x))]
            except (TypeError, ValueError):
                raise Mismatch("%s: element %r is %r, not a number" % (name, where, x))
        a, b = flat(mine, []), flat(theirs, [])
        if [w for w, _ in a] != [w for w, _ in b]:
            raise Mismatch("%s: the shapes differ (%d vs %d values)" % (name, len(a), len(b)))
        if not a:
            raise Mismatch("%s: nothing to compare" % name)
        worst, bad = 0.0, []
        for (w, x), (_, y) in zip(a, b):
            err = abs(x - y) / (max(1.0, abs(x)) if relative else 1.0)
            if not err <= tol:  # NaN fails
                bad.append("%s%s: reference %.17g, trainer %.17g, %s %.3g" % (
                    name, w, x, y, "|diff|/max(1,|x|)" if relative else "|diff|", err))
                err = float("inf") if err != err else err
            worst = max(worst, err)
        self.ran += 1
        print("hybrid_ref: check %-34s max %s = %.3g over %d value(s) (tol %g)%s" % (
            name, "|diff|/max(1,|x|)" if relative else "|diff|", worst, len(a), tol, "" if not bad else "  FAIL"))
        if bad:
            self.failures.append("%s: %d value(s) off, first: %s" % (name, len(bad), "; ".join(bad[:3])))
        return worst

    def condition(self, name, ok, detail):
        self.ran += 1
        print("hybrid_ref: check %-34s %s%s" % (name, detail, "" if ok else "  FAIL"))
        if not ok:
            self.failures.append("%s: %s" % (name, detail))

    def finish(self, expected):
        if self.ran != expected:
            self.failures.append("%d checks ran, %d expected (a check was skipped or added)" % (self.ran, expected))
        if self.failures:
            raise Mismatch("%d of %d check(s) failed:\n  %s" % (len(self.failures), self.ran,
                                                                  "\n  ".join(self.failures)))
        print("hybrid_ref: OK, %d of %d checks passed" % (self.ran, expected))


BATCH_KEYS = ("config", "prompt", "responses", "rewards", "advantages", "old_logprobs", "ref_logprobs")
CONFIG_KEYS = ("family", "vocab", "d_model", "n_layers", "ffn_dim", "rms_eps", "rope_theta",
               "gdn_hk", "gdn_hv", "gdn_dk", "gdn_dv", "conv_kernel", "attn_heads",
               "attn_kv_heads", "head_dim", "rope_dim", "train_mode", "lora_r", "lora_alpha",
               "lora_experts", "grad_mode", "epsilon", "beta", "temperature")


def load_batch(batch_path):
    """A --dump-batch file, every docs/model.md section 6 key present and consistently sized."""
    try:
        with open(batch_path) as f:
            batch = json.load(f)
    except (OSError, ValueError) as e:
        raise Mismatch("cannot read batch %s: %s" % (batch_path, e))
    if not isinstance(batch, dict):
        raise Mismatch("batch %s: not a JSON object" % batch_path)
    for key in BATCH_KEYS:
        if key not in batch:
            raise Mismatch("batch %s: key %r (docs/model.md section 6) missing" % (batch_path, key))
    cfg = batch["config"]
    for key in CONFIG_KEYS:
        if key not in cfg:
            raise Mismatch("batch %s config: key %r (docs/model.md section 6) missing" % (batch_path, key))
    if cfg["family"] != "hybrid":
        raise Usage("this reference covers family hybrid only, batch has %r" % cfg["family"])
    if cfg["train_mode"] not in ("lora", "full"):
        raise Mismatch("batch %s config: train_mode %r" % (batch_path, cfg["train_mode"]))
    prompt, responses = batch["prompt"], batch["responses"]
    G = len(responses)
    if G == 0 or any(len(batch[k]) != G for k in ("rewards", "advantages", "old_logprobs", "ref_logprobs")):
        raise Mismatch("batch %s: %d responses but rewards/advantages/old/ref have %s entries"
                       % (batch_path, G, [len(batch[k]) for k in ("rewards", "advantages", "old_logprobs",
                                                                  "ref_logprobs")]))
    if len(prompt) < 1:
        raise Mismatch("batch %s: empty prompt" % batch_path)
    for i, y in enumerate(responses):
        if len(y) < 1 or len(batch["old_logprobs"][i]) != len(y) or len(batch["ref_logprobs"][i]) != len(y):
            raise Mismatch("batch %s: member %d has %d tokens, %d old and %d ref log-probs"
                           % (batch_path, i, len(y), len(batch["old_logprobs"][i]), len(batch["ref_logprobs"][i])))
        for tok in list(prompt) + list(y):
            if not (isinstance(tok, int) and 0 <= tok < cfg["vocab"]):
                raise Mismatch("batch %s: member %d token %r outside the vocabulary" % (batch_path, i, tok))
    return batch


def norms_perturbed(tensors):
    zero_centred = [n for n in tensors if n == "norm.weight" or n.endswith((
        "norm1.weight", "norm2.weight", "q_norm.weight", "k_norm.weight"))]
    standard = [n for n in tensors if n.endswith("gdn.norm.weight")]
    return any(v != 0.0 for n in zero_centred for v in tensors[n][1]) or \
        any(v != 1.0 for n in standard for v in tensors[n][1])


class Reference:
    """The policy and reference-policy log-probs of one batch's tokens under one weights file."""

    def __init__(self, weights_path, batch):
        self.tensors, self.dtype = read_safetensors(weights_path)
        cfg = batch["config"]
        self.cfg = cfg
        self.prompt = list(batch["prompt"])
        self.responses = [list(y) for y in batch["responses"]]
        self.lora = sorted(n[:-len(".lora_A")] for n in self.tensors if n.endswith(".lora_A"))
        self.perturbed = norms_perturbed(self.tensors)
        temp = float(cfg["temperature"])
        policy = Model(cfg, self.tensors, with_lora=True)
        self.policy = policy.group_logprobs(self.prompt, self.responses, temp)
        if cfg["train_mode"] == "lora" and self.lora:
            self.ref = Model(cfg, self.tensors, with_lora=False).group_logprobs(self.prompt, self.responses, temp)
        else:  # train_mode full: the reference is the step-0 weights, i.e. the policy at step 1
            self.ref = self.policy
        self.gap = max(abs(a - b) for lp, rf in zip(self.policy, self.ref) for a, b in zip(lp, rf))
        self.lp_tol = 1e-9 if self.dtype == "F64" else 1e-4
        self.adv_tol = 1e-9 if self.dtype == "F64" else 1e-6
        self.loss_tol = 1e-9 if self.dtype == "F64" else 1e-4
        print("hybrid_ref: %s (%s, %d tensors, %d LoRA pairs), P=%d G=%d R=%s, train_mode %s, "
              "temperature %r, norm weights %s; max |policy - reference| log-prob = %.3g"
              % (weights_path, self.dtype, len(self.tensors), len(self.lora), len(self.prompt),
                 len(self.responses), [len(y) for y in self.responses], cfg["train_mode"], temp,
                 "perturbed" if self.perturbed else "at their initial values", self.gap))

    def same_tokens(self, batch, where):
        if list(batch["prompt"]) != self.prompt or [list(y) for y in batch["responses"]] != self.responses:
            raise Mismatch("%s: the batch's tokens are not the ones the reference scored" % where)

    def check_run(self, checks, tag, batch, loss_log, old_expected=None, weights_path=None):
        """The four checks of one trainer run: old log-probs (against the policy, or against
        the supplied values when the run had external old log-probs), reference log-probs,
        advantages, and the loss recomputed from docs/model.md section 4 against the trainer's.
        With weights_path (the run's --save-init), a fifth: the run used these weights."""
        self.same_tokens(batch, tag)
        if weights_path is not None:
            t2, _ = read_safetensors(weights_path)
            same = sorted(t2) == sorted(self.tensors) and all(t2[n] == self.tensors[n] for n in t2)
            checks.condition(tag + " weights", same, "the run's --save-init %s the scored weights"
                             % ("equals" if same else "DIFFERS FROM"))
        if old_expected is None:
            checks.values(tag + " old_logprobs", self.policy, batch["old_logprobs"], self.lp_tol)
            old = self.policy  # the trainer scored them: rho = 1 exactly in the reference
        else:
            checks.values(tag + " old_logprobs (supplied)", old_expected, batch["old_logprobs"], self.lp_tol)
            old = old_expected
        checks.values(tag + " ref_logprobs", self.ref, batch["ref_logprobs"], self.lp_tol)
        adv = advantages([float(r) for r in batch["rewards"]])
        checks.values(tag + " advantages", adv, batch["advantages"], self.adv_tol, relative=True)
        cfg = batch["config"]
        loss, census = grpo_loss(self.policy, old, self.ref, adv, float(cfg["epsilon"]), float(cfg["beta"]))
        checks.values(tag + " loss", [loss], [trainer_loss(loss_log)], self.loss_tol, relative=True)
        return loss, census


def check(weights_path, batch_path, loss_log, old_from, require_perturbed):
    """Standalone mode: one weights file, one batch dump, the trainer's log."""
    batch = load_batch(batch_path)
    ref = Reference(weights_path, batch)
    checks = Checks()
    expected = 4
    if require_perturbed:
        expected += 1
        checks.condition("norm weights perturbed", ref.perturbed,
                         "some RMSNorm weight is off its initial value" if ref.perturbed else
                         "every RMSNorm weight is at its initial value (did `--load` take effect?)")
    old = None
    if old_from is not None:
        old = read_rollouts_old(old_from)
    loss, census = ref.check_run(checks, "run", batch, loss_log, old)
    print("hybrid_ref: loss %.17g; token branches %s" % (loss, census))
    checks.finish(expected)


def write_json(weights_path, batch_path, out_path):
    """The --json mode: the reference's log-probs, advantages and loss, for longstraw-parity."""
    batch = load_batch(batch_path)
    ref = Reference(weights_path, batch)
    cfg = batch["config"]
    adv = advantages([float(r) for r in batch["rewards"]])
    loss, _ = grpo_loss(ref.policy, batch["old_logprobs"], batch["ref_logprobs"], adv,
                        float(cfg["epsilon"]), float(cfg["beta"]))
    # no discrete decision in this family (no top-k, no routing): nothing a near-tie could flip
    doc = {"policy": ref.policy, "ref_policy": ref.ref, "advantages": adv, "loss": loss,
           "decisions": {"count": 0, "kinds": {}}}
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, out_path)


def read_rollouts_old(path):
    try:
        with open(path) as f:
            first = f.readline()
        doc = json.loads(first)
    except (OSError, ValueError) as e:
        raise Mismatch("cannot read rollouts %s: %s" % (path, e))
    if not isinstance(doc, dict) or "old_logprobs" not in doc:
        raise Mismatch("rollouts %s: no 'old_logprobs' on the first line" % path)
    return doc["old_logprobs"]


def perturb_norms(src, dst, seed):
    tensors, dtype = read_safetensors(src)
    # small deterministic LCG so the output does not depend on the Python version
    state = [seed & 0xFFFFFFFF or 1]

    def rnd():
        state[0] = (1664525 * state[0] + 1013904223) & 0xFFFFFFFF
        return state[0] / 4294967296.0 - 0.5  # [-0.5, 0.5)
    n = 0
    for name in sorted(tensors):
        if name.endswith("norm.weight") or name.endswith(("norm1.weight", "norm2.weight")):
            shape, vals = tensors[name]
            tensors[name] = (shape, [v + 0.6 * rnd() for v in vals])
            n += 1
    if n == 0:
        raise Mismatch("%s: no RMSNorm weights found" % src)
    write_safetensors(dst, tensors, dtype if dtype in ("F64", "F32") else "F64",
                      {"content": "weights", "note": "hybrid_ref.py --perturb-norms"})
    print("hybrid_ref: perturbed %d norm tensors -> %s" % (n, dst))


def parse_args(args, opt, flags):
    """The positional arguments of args; opt[o] set to the value after each option o of opt, flags[f]
    to True for each flag f of flags; Usage for an option without its value or one of neither."""
    pos, i = [], 0
    while i < len(args):
        a = args[i]
        if a in opt:
            if i + 1 >= len(args):
                raise Usage("%s needs a value" % a)
            opt[a] = args[i + 1]
            i += 2
        elif a in flags:
            flags[a] = True
            i += 1
        elif a.startswith("--"):
            raise Usage("unknown option %s" % a)
        else:
            pos.append(a)
            i += 1
    return pos


def main(argv):
    args = argv[1:]
    try:
        if args and args[0] == "--perturb-norms":
            if len(args) not in (3, 4):
                raise Usage("--perturb-norms IN OUT [SEED]")
            perturb_norms(args[1], args[2], int(args[3]) if len(args) == 4 else 1)
            return 0
        if any(a in ("-h", "--help") for a in args):
            print(__doc__)
            return 0
        opt, flags = {"--loss-from": None, "--old-from": None, "--json": None}, {"--require-perturbed-norms": False}
        pos = parse_args(args, opt, flags)
        req = flags["--require-perturbed-norms"]
        if len(pos) != 2:
            raise Usage("expected WEIGHTS.safetensors BATCH.json")
        if opt["--json"] is not None:
            write_json(pos[0], pos[1], opt["--json"])
            return 0
        if opt["--loss-from"] is None:
            raise Usage("--loss-from LOG is required: the loss check is never skipped")
        check(pos[0], pos[1], opt["--loss-from"], opt["--old-from"], req)
        return 0
    except Usage as e:
        sys.stderr.write("hybrid_ref: usage error: %s\n%s" % (e, __doc__))
        return 2
    except Mismatch as e:
        sys.stderr.write("hybrid_ref: FAIL: %s\n" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
