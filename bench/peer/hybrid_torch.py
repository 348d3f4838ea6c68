#!/usr/bin/python3
"""A PyTorch peer of longstraw-train's hybrid family: the full-graph GRPO step.

Written from docs/model.md (sections 0, 1, 3, 4, 5, 6), not from the trainer's code or the
other Python in the repository (the safetensors reader follows the format, as
examples/torch_cp/safetensors_io.py does). It is the baseline LongStraw is compared with in
bench/bench_peer.sh: one GRPO step in which every one of the G members is its own autograd
graph over the whole prompt + response (the prompt is recomputed, and kept, once per member),
then backward and one AdamW step. bench/peer/check_peer.py proves it computes the trainer's
log-probs, loss and gradients (ctest peer_matches_trainer).

usage:
  hybrid_torch.py --weights W.safetensors (--batch B.json | --config C.json --rollouts R.jsonl)
                  [--mode eager|ckpt] [--dtype f32|f64] [--threads N] [--per-member-backward]
                  [--block N] [--chunk N] [--json OUT] [--dump-grads OUT.safetensors] [--quiet]

  --weights   longstraw-train --save-init output (docs/model.md section 5 names; LoRA
              tensors present iff train mode lora).
  --batch     a longstraw-train --dump-batch file: config with the objective keys, prompt,
              responses, rewards, old and ref log-probs. The step uses the batch's old
              log-probs (ratios as the trainer had them); the ref log-probs are recomputed.
  --config/--rollouts
              a model config and the first line of a --rollouts JSONL file (prompt,
              responses, rewards, optional old_logprobs); objective options below.
  --mode      eager: plain autograd, the attention's P x P scores whole (per head);
              ckpt:  torch.utils.checkpoint around every block, and the attention computed
                     in query blocks of --block rows with a recomputing backward, so no
                     P x P score matrix exists at any time.
  --per-member-backward
              backward after each member (gradients accumulated) instead of one backward
              of the whole loss: one member's graph alive at a time.
  --train-mode lora|full, --lora-r, --lora-alpha, --epsilon, --beta, --temperature, --lr:
              as longstraw-train (defaults 0.2, 0.04, 1, 1e-3; lora r/alpha from the batch).
  --json      writes {"policy", "ref_policy", "old", "advantages", "loss", "step_s",
              "peak_rss_kib", "base_rss_kib" (before the step), ...}; floats repr-exact.
  --dump-grads  the gradients of the trainable tensors before the optimizer (safetensors,
              the trainer's names), as longstraw-train --dump-grads.

exit: 0 done, 1 the step failed (out of memory included: "out of memory" on stderr),
2 bad usage or input (named).
"""

import argparse
import json
import math
import os
import resource
import struct
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

LORA_TARGETS = ("attn.q", "attn.k", "attn.v", "attn.o", "gdn.in_qkv", "gdn.in_z", "gdn.out",
                "mlp.gate", "mlp.up", "mlp.down")
MODEL_KEYS = ("vocab", "d_model", "n_layers", "ffn_dim", "rms_eps", "rope_theta", "gdn_hk", "gdn_hv",
              "gdn_dk", "gdn_dv", "conv_kernel", "attn_heads", "attn_kv_heads", "head_dim", "rope_dim")


class Usage(Exception):
    pass


# ----------------------------------------------------------------------------- safetensors

_ST_DTYPES = {"F64": (torch.float64, 8), "F32": (torch.float32, 4)}


def st_load(path):
    """NAME -> tensor from a safetensors file; Usage naming the file and tensor on bad input."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise Usage("%s: cannot read: %s" % (path, e))
    if len(raw) < 8:
        raise Usage("%s: too short for safetensors" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise Usage("%s: header length %d past the end of the file" % (path, n))
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise Usage("%s: header is not JSON: %s" % (path, e))
    if not isinstance(header, dict):
        raise Usage("%s: header is not an object" % path)
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(h, dict) or h.get("dtype") not in _ST_DTYPES:
            raise Usage("%s: tensor %s: dtype must be F64 or F32" % (path, name))
        dt, esz = _ST_DTYPES[h["dtype"]]
        shape, offs = h.get("shape"), h.get("data_offsets")
        if (not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape)
                or not isinstance(offs, list) or len(offs) != 2):
            raise Usage("%s: tensor %s: bad shape or data_offsets" % (path, name))
        count = math.prod(shape)
        b, e = offs
        if not (isinstance(b, int) and isinstance(e, int) and 0 <= b <= e <= len(data)) or e - b != count * esz:
            raise Usage("%s: tensor %s: data_offsets %r do not fit shape %r" % (path, name, offs, shape))
        t = torch.frombuffer(bytearray(data[b:e]), dtype=dt) if count else torch.zeros(0, dtype=dt)
        out[name] = t.reshape(shape).clone()
    return out


def st_save(path, tensors):
    """Write NAME -> tensor (f32/f64) to PATH atomically, names sorted."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        code = "F64" if t.dtype == torch.float64 else "F32"
        blob = t.numpy().tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- primitives

def rmsnorm(x, gamma, eps):
    """docs/model.md section 0: gamma * x * (mean x^2 + eps)^-1/2 over the last dim."""
    return gamma * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope_neox(x, pos, dr, theta):
    """NeoX RoPE on the first dr dims of x [T, heads, hd]; pos [T] absolute positions."""
    half = dr // 2
    i = torch.arange(half, dtype=torch.float64)
    phi = pos.to(torch.float64)[:, None] * theta ** (-2.0 * i / dr)[None, :]
    cs = phi.cos().to(x.dtype)[:, None, :]
    sn = phi.sin().to(x.dtype)[:, None, :]
    a, b, rest = x[..., :half], x[..., half:dr], x[..., dr:]
    return torch.cat((a * cs - b * sn, b * cs + a * sn, rest), dim=-1)


class BlockedCausalAttention(torch.autograd.Function):
    """Causal softmax attention computed in query blocks: q, k, v [H, T, hd] -> o [H, T, hd].
    Forward keeps o and the log-normaliser per row; backward recomputes each block's
    probabilities (docs/model.md section 0: dP = dO V^T, dZ = P (dP - rowsum(dO O)),
    dQ = tau dZ K, dK = tau dZ^T Q, dV = P^T dO). Peak extra memory: H x block x T."""

    @staticmethod
    def forward(ctx, q, k, v, tau, block):
        H, T, hd = q.shape
        o = torch.empty_like(q)
        lse = torch.empty(H, T, dtype=q.dtype)
        for s in range(0, T, block):
            e = min(T, s + block)
            z = tau * (q[:, s:e] @ k[:, :e].transpose(1, 2))
            z[:, :, s:].masked_fill_(_causal_cut(e - s, q.device), float("-inf"))
            m = z.logsumexp(-1)
            lse[:, s:e] = m
            o[:, s:e] = torch.exp(z - m[..., None]) @ v[:, :e]
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.tau, ctx.block = tau, block
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        tau, block = ctx.tau, ctx.block
        H, T, hd = q.shape
        do = do.contiguous()
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dsum = (do * o).sum(-1)
        for s in range(0, T, block):
            e = min(T, s + block)
            z = tau * (q[:, s:e] @ k[:, :e].transpose(1, 2))
            z[:, :, s:].masked_fill_(_causal_cut(e - s, q.device), float("-inf"))
            p = torch.exp(z - lse[:, s:e, None])
            dv[:, :e] += p.transpose(1, 2) @ do[:, s:e]
            dp = do[:, s:e] @ v[:, :e].transpose(1, 2)
            dz = p * (dp - dsum[:, s:e, None])
            dq[:, s:e] = tau * (dz @ k[:, :e])
            dk[:, :e] += tau * (dz.transpose(1, 2) @ q[:, s:e])
        return dq, dk, dv, None, None


def _causal_cut(n, device):
    """[n, n] True strictly above the diagonal (the future keys of a block's own rows)."""
    return torch.ones(n, n, dtype=torch.bool, device=device).triu(1)


def full_causal_attention(q, k, v, tau):
    """Plain causal attention, the [H, T, T] scores whole: the eager baseline."""
    T = q.shape[1]
    z = tau * (q @ k.transpose(1, 2))
    z = z.masked_fill(_causal_cut(T, q.device), float("-inf"))
    return torch.softmax(z, dim=-1) @ v


def gated_delta_chunked(q, k, v, g, beta, chunk):
    """The GDN recurrence of docs/model.md section 1.1 step 6 from a zero state, in the chunked
    (WY) form: q, k [H, T, dk] (q already scaled), v [H, T, dv], g, beta [H, T] -> o [H, T, dv].
    Within a chunk with cumulative log-decay c_t: delta = (I + L)^-1 (beta v - beta e^c K S0),
    L_ts = beta_t e^(c_t - c_s) k_t.k_s (s < t); o_t = e^c_t S0^T q_t + sum_{s<=t} e^(c_t-c_s)
    (q_t.k_s) delta_s; S_end = e^c_C S0 + sum_s e^(c_C - c_s) k_s delta_s^T. Equal to the
    token recurrence up to rounding (check_peer.py compares it with one)."""
    H, T, dk = k.shape
    dv = v.shape[-1]
    pad = (-T) % chunk
    if pad:  # zero keys with beta = 0 and g = 0 after the end: no effect on earlier tokens
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    N = (T + pad) // chunk
    q = q.reshape(H, N, chunk, dk)
    k = k.reshape(H, N, chunk, dk)
    v = v.reshape(H, N, chunk, dv)
    c = g.reshape(H, N, chunk).cumsum(-1)
    beta = beta.reshape(H, N, chunk)
    incl = torch.ones(chunk, chunk, dtype=torch.bool).tril()
    strict = torch.ones(chunk, chunk, dtype=torch.bool).tril(-1)
    diff = c[..., :, None] - c[..., None, :]
    decay = diff.masked_fill(~incl, 0.0).exp().masked_fill(~incl, 0.0)
    kb = k * beta[..., None]
    L = ((kb @ k.transpose(-1, -2)) * decay).masked_fill(~strict, 0.0)
    eye = torch.eye(chunk, dtype=q.dtype).expand(H, N, chunk, chunk)
    Tinv = torch.linalg.solve_triangular(eye + L, eye, upper=False, unitriangular=True)
    u = Tinv @ (v * beta[..., None])
    w = Tinv @ (kb * c.exp()[..., None])
    qk = (q @ k.transpose(-1, -2)) * decay
    qdec = q * c.exp()[..., None]
    kdec = k * (c[..., -1:] - c).exp()[..., None]
    S = torch.zeros(H, dk, dv, dtype=q.dtype)
    outs = []
    for n in range(N):
        delta = u[:, n] - w[:, n] @ S
        outs.append(qdec[:, n] @ S + qk[:, n] @ delta)
        S = S * c[:, n, -1].exp()[:, None, None] + kdec[:, n].transpose(1, 2) @ delta
    return torch.stack(outs, 1).reshape(H, N * chunk, dv)[:, :T]


# ----------------------------------------------------------------------------- model

class Hybrid:
    """The hybrid family's weights (base + LoRA) and its forward over one sequence."""

    def __init__(self, cfg, tensors, dtype, train_mode, lora_r, lora_alpha, block, chunk):
        for key in MODEL_KEYS:
            if key not in cfg:
                raise Usage("config: key %r (docs/model.md section 6) missing" % key)
        self.c = cfg
        self.dtype = dtype
        self.eps = float(cfg["rms_eps"])
        self.block, self.chunk = block, chunk
        self.train_mode = train_mode
        self.w = {}
        self.trainable = {}
        for name, t in tensors.items():
            self.w[name] = t.to(dtype)
        lora_names = sorted(n for n in self.w if n.endswith((".lora_A", ".lora_B")))
        if train_mode == "lora":
            if not lora_names:
                raise Usage("weights: train mode lora but no .lora_A/.lora_B tensors (was --save-init "
                            "written by a run with --train-mode lora?)")
            for n in lora_names:
                base = n.rsplit(".", 1)[0]
                if base.split(".", 2)[-1] not in LORA_TARGETS:
                    raise Usage("weights: %s is not a LoRA target of the hybrid family (docs/model.md §3)" % n)
                self.w[n].requires_grad_(True)
                self.trainable[n] = self.w[n]
            self.scale = float(lora_alpha) / float(lora_r)
        else:
            if lora_names:
                raise Usage("weights: train mode full but the file holds LoRA tensors (%s)" % lora_names[0])
            for n, t in self.w.items():
                t.requires_grad_(True)
                self.trainable[n] = t
            self.scale = 0.0
        self._check_shapes()

    def _check_shapes(self):
        c = self.c
        d, V, I = c["d_model"], c["vocab"], c["ffn_dim"]
        need = {"embed.weight": [V, d], "lm_head.weight": [V, d], "norm.weight": [d]}
        C = 2 * c["gdn_hk"] * c["gdn_dk"] + c["gdn_hv"] * c["gdn_dv"]
        H, Hkv, hd = c["attn_heads"], c["attn_kv_heads"], c["head_dim"]
        Hv, dv = c["gdn_hv"], c["gdn_dv"]
        for i in range(c["n_layers"]):
            p = "layers.%d." % i
            need.update({p + "norm1.weight": [d], p + "norm2.weight": [d], p + "mlp.gate.weight": [I, d],
                         p + "mlp.up.weight": [I, d], p + "mlp.down.weight": [d, I]})
            if (i + 1) % 4 == 0:
                need.update({p + "attn.q.weight": [H * 2 * hd, d], p + "attn.k.weight": [Hkv * hd, d],
                             p + "attn.v.weight": [Hkv * hd, d], p + "attn.o.weight": [d, H * hd],
                             p + "attn.q_norm.weight": [hd], p + "attn.k_norm.weight": [hd]})
            else:
                need.update({p + "gdn.in_qkv.weight": [C, d], p + "gdn.in_z.weight": [Hv * dv, d],
                             p + "gdn.in_b.weight": [Hv, d], p + "gdn.in_a.weight": [Hv, d],
                             p + "gdn.conv.weight": [C, c["conv_kernel"]], p + "gdn.A_log": [Hv],
                             p + "gdn.dt_bias": [Hv], p + "gdn.norm.weight": [dv],
                             p + "gdn.out.weight": [d, Hv * dv]})
        for n, shape in need.items():
            if n not in self.w:
                raise Usage("weights: tensor %s (docs/model.md section 5) missing" % n)
            if list(self.w[n].shape) != shape:
                raise Usage("weights: tensor %s has shape %s, the config implies %s"
                            % (n, list(self.w[n].shape), shape))

    def linear(self, x, name, lora):
        y = x @ self.w[name + ".weight"].t()
        a = self.w.get(name + ".lora_A")
        if lora and a is not None:
            y = y + self.scale * ((x @ a.t()) @ self.w[name + ".lora_B"].t())
        return y

    def gdn(self, p, x, lora):
        c = self.c
        T = x.shape[0]
        Hk, Hv, dk, dv, K = c["gdn_hk"], c["gdn_hv"], c["gdn_dk"], c["gdn_dv"], c["conv_kernel"]
        m = self.linear(x, p + "gdn.in_qkv", lora)
        z = self.linear(x, p + "gdn.in_z", lora).view(T, Hv, dv)
        b = self.linear(x, p + "gdn.in_b", False)
        a = self.linear(x, p + "gdn.in_a", False)
        C = m.shape[1]
        conv = F.conv1d(F.pad(m.t()[None], (K - 1, 0)), self.w[p + "gdn.conv.weight"][:, None, :], groups=C)
        cm = F.silu(conv[0].t())
        nq = Hk * dk
        q = cm[:, :nq].reshape(T, Hk, dk)
        k = cm[:, nq:2 * nq].reshape(T, Hk, dk)
        v = cm[:, 2 * nq:].reshape(T, Hv, dv)
        q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) * dk ** -0.5
        k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        beta = torch.sigmoid(b)
        g = -self.w[p + "gdn.A_log"].exp() * F.softplus(a + self.w[p + "gdn.dt_bias"])
        rep = Hv // Hk
        q = q.repeat_interleave(rep, dim=1).transpose(0, 1)
        k = k.repeat_interleave(rep, dim=1).transpose(0, 1)
        o = gated_delta_chunked(q, k, v.transpose(0, 1), g.t(), beta.t(), self.chunk).transpose(0, 1)
        y = rmsnorm(o, self.w[p + "gdn.norm.weight"], self.eps) * F.silu(z)
        return self.linear(y.reshape(T, Hv * dv), p + "gdn.out", lora)

    def attn(self, p, x, lora, blocked):
        c = self.c
        T = x.shape[0]
        H, Hkv, hd, dr = c["attn_heads"], c["attn_kv_heads"], c["head_dim"], c["rope_dim"]
        qg = self.linear(x, p + "attn.q", lora).view(T, H, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:]
        k = self.linear(x, p + "attn.k", lora).view(T, Hkv, hd)
        v = self.linear(x, p + "attn.v", lora).view(T, Hkv, hd)
        pos = torch.arange(T)
        theta = float(c["rope_theta"])
        q = rope_neox(rmsnorm(q, 1.0 + self.w[p + "attn.q_norm.weight"], self.eps), pos, dr, theta)
        k = rope_neox(rmsnorm(k, 1.0 + self.w[p + "attn.k_norm.weight"], self.eps), pos, dr, theta)
        rep = H // Hkv
        q = q.transpose(0, 1).contiguous()
        k = k.repeat_interleave(rep, dim=1).transpose(0, 1).contiguous()
        v = v.repeat_interleave(rep, dim=1).transpose(0, 1).contiguous()
        tau = hd ** -0.5
        if blocked:
            o = BlockedCausalAttention.apply(q, k, v, tau, self.block)
        else:
            o = full_causal_attention(q, k, v, tau)
        y = o.transpose(0, 1) * torch.sigmoid(gate)
        return self.linear(y.reshape(T, H * hd), p + "attn.o", lora)

    def block_fn(self, i, lora, blocked):
        p = "layers.%d." % i
        is_attn = (i + 1) % 4 == 0

        def run(h):
            x = rmsnorm(h, 1.0 + self.w[p + "norm1.weight"], self.eps)
            h = h + (self.attn(p, x, lora, blocked) if is_attn else self.gdn(p, x, lora))
            x = rmsnorm(h, 1.0 + self.w[p + "norm2.weight"], self.eps)
            mlp = self.linear(F.silu(self.linear(x, p + "mlp.gate", lora)) * self.linear(x, p + "mlp.up", lora),
                              p + "mlp.down", lora)
            return h + mlp
        return run

    def logprobs(self, tokens, n_prompt, targets, temperature, lora, mode):
        """Log-probs of targets (the response) given tokens = prompt + response[:-1], one
        sequence from position 0 (the full-graph computation)."""
        ids = torch.tensor(tokens, dtype=torch.long)
        h = self.w["embed.weight"][ids]
        for i in range(self.c["n_layers"]):
            fn = self.block_fn(i, lora, blocked=(mode == "ckpt"))
            if mode == "ckpt" and torch.is_grad_enabled():
                h = checkpoint(fn, h, use_reentrant=False)
            else:
                h = fn(h)
        hr = rmsnorm(h[n_prompt - 1:], 1.0 + self.w["norm.weight"], self.eps)
        logits = (hr @ self.w["lm_head.weight"].t()) / temperature
        tgt = torch.tensor(targets, dtype=torch.long)
        return torch.log_softmax(logits, dim=-1).gather(1, tgt[:, None])[:, 0]


# ----------------------------------------------------------------------------- GRPO

def advantages(rewards):
    """docs/model.md section 4: (r - mean) / (std + 1e-4), Bessel's std; G = 1 gives 0."""
    G = len(rewards)
    if G == 1:
        return [0.0]
    mean = sum(rewards) / G
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (G - 1))
    return [(r - mean) / (std + 1e-4) for r in rewards]


def member_loss(lp, old, ref, A, eps, beta, G):
    """(1/(G R)) sum_t [ -min(rho A, clip(rho) A) + beta KL_t ]; the clipped value is a
    constant where its branch is taken (docs/model.md section 4)."""
    rho = torch.exp(lp - old)
    if A > 0:
        clipped = rho > 1.0 + eps
    elif A < 0:
        clipped = rho < 1.0 - eps
    else:
        clipped = torch.zeros_like(rho, dtype=torch.bool)
    pg = torch.where(clipped, -(rho.detach().clamp(1.0 - eps, 1.0 + eps) * A), -(rho * A))
    dlt = ref - lp
    kl = torch.exp(dlt) - dlt - 1.0
    return (pg + beta * kl).sum() / (G * lp.shape[0])


def grpo_step(model, prompt, responses, rewards, old_in, opt_args, mode, per_member, optimizer, log):
    """Reference scoring (no grad, adapters off / step-0 weights), then each member's full
    sequence under autograd, the loss, backward, one AdamW step. Returns the figures."""
    eps, beta, temp = opt_args["epsilon"], opt_args["beta"], opt_args["temperature"]
    G = len(responses)
    adv = advantages(rewards)
    P = len(prompt)
    seqs = [list(prompt) + list(y[:-1]) for y in responses]
    t0 = time.time()
    ref = []
    if beta != 0.0:
        with torch.no_grad():
            for i, y in enumerate(responses):
                ref.append(model.logprobs(seqs[i], P, y, temp, lora=(model.train_mode != "lora"), mode=mode))
                log("ref member %d scored (%.1f s)" % (i, time.time() - t0))
    t_ref = time.time() - t0
    policy, olds, losses = [], [], []
    total = None
    for i, y in enumerate(responses):
        lp = model.logprobs(seqs[i], P, y, temp, lora=True, mode=mode)
        old = lp.detach() if old_in is None else torch.tensor(old_in[i], dtype=lp.dtype)
        rf = ref[i] if beta != 0.0 else lp.detach()
        li = member_loss(lp, old, rf, adv[i], eps, beta, G)
        policy.append(lp.detach())
        olds.append(old)
        losses.append(float(li.detach()))
        if per_member:
            li.backward()
        else:
            total = li if total is None else total + li
        log("member %d forward%s (%.1f s)" % (i, " + backward" if per_member else "", time.time() - t0))
    if not per_member:
        total.backward()
        log("backward (%.1f s)" % (time.time() - t0))
    grads = {n: (t.grad.detach().clone() if t.grad is not None else torch.zeros_like(t))
             for n, t in model.trainable.items()}
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    step_s = time.time() - t0
    return {"policy": [p.tolist() for p in policy], "ref_policy": [r.tolist() for r in ref] if ref else
            [p.tolist() for p in policy], "old": [o.tolist() for o in olds], "advantages": adv,
            "loss": math.fsum(losses), "step_s": step_s, "ref_s": t_ref}, grads


# ----------------------------------------------------------------------------- inputs

def read_json(path, what):
    try:
        with open(path) as f:
            return json.load(f) if what != "rollouts" else json.loads(f.readline())
    except (OSError, ValueError) as e:
        raise Usage("%s %s: %s" % (what, path, e))


def check_tokens(where, prompt, responses, rewards, vocab):
    if not isinstance(prompt, list) or len(prompt) < 1:
        raise Usage("%s: prompt must be a non-empty list of token ids" % where)
    if not isinstance(responses, list) or not responses or any(not isinstance(y, list) or not y for y in responses):
        raise Usage("%s: responses must be a non-empty list of non-empty token lists" % where)
    if not isinstance(rewards, list) or len(rewards) != len(responses):
        raise Usage("%s: rewards must have one number per response (%d)" % (where, len(responses)))
    for tok in prompt + [t for y in responses for t in y]:
        if not isinstance(tok, int) or not 0 <= tok < vocab:
            raise Usage("%s: token %r outside the vocabulary [0, %d)" % (where, tok, vocab))


def current_rss_kib():
    """Resident set now (torch, the weights and the inputs loaded), from /proc/self/statm."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        return 0


def parse(argv):
    ap = argparse.ArgumentParser(prog="hybrid_torch.py", description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--batch")
    ap.add_argument("--config")
    ap.add_argument("--rollouts")
    ap.add_argument("--mode", choices=("eager", "ckpt"), default="eager")
    ap.add_argument("--dtype", choices=("f32", "f64"), default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-member-backward", action="store_true")
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--train-mode", choices=("lora", "full"), default=None)
    ap.add_argument("--lora-r", type=int, default=None)
    ap.add_argument("--lora-alpha", type=float, default=None)
    ap.add_argument("--epsilon", type=float, default=None)
    ap.add_argument("--beta", type=float, default=None)
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--json")
    ap.add_argument("--dump-grads")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    if (a.batch is None) == (a.rollouts is None):
        ap.error("give exactly one of --batch and --config/--rollouts")
    if a.rollouts is not None and a.config is None:
        ap.error("--rollouts needs --config")
    for name in ("threads", "block", "chunk"):
        if getattr(a, name) < 1:
            ap.error("--%s must be at least 1" % name)
    return a


def main(argv):
    a = parse(argv)
    torch.set_num_threads(a.threads)
    log = (lambda s: None) if a.quiet else (lambda s: sys.stderr.write("hybrid_torch: %s\n" % s))
    try:
        tensors = st_load(a.weights)
        if not tensors:
            raise Usage("%s: no tensors" % a.weights)
        file_dtype = "f64" if next(iter(tensors.values())).dtype == torch.float64 else "f32"
        if a.batch is not None:
            b = read_json(a.batch, "batch")
            for key in ("config", "prompt", "responses", "rewards", "old_logprobs"):
                if key not in b:
                    raise Usage("batch %s: key %r missing (docs/model.md section 6)" % (a.batch, key))
            cfg = b["config"]
            prompt, responses, rewards, old_in = b["prompt"], b["responses"], b["rewards"], b["old_logprobs"]
            where = "batch " + a.batch
        else:
            cfg = read_json(a.config, "config")
            r = read_json(a.rollouts, "rollouts")
            if not isinstance(r, dict):
                raise Usage("rollouts %s: first line is not an object" % a.rollouts)
            prompt, responses, rewards = r.get("prompt"), r.get("responses"), r.get("rewards")
            old_in = r.get("old_logprobs")
            where = "rollouts " + a.rollouts
        if cfg.get("family", "hybrid") != "hybrid":
            raise Usage("%s: family %r; this peer is the hybrid family"
                        % ("batch " + a.batch if a.batch else "config " + a.config, cfg.get("family")))
        for key in MODEL_KEYS:
            if key not in cfg:
                raise Usage("%s config: key %r missing" % (where, key))
        check_tokens(where, prompt, responses, rewards, cfg["vocab"])

        def pick(opt, key, default):
            return opt if opt is not None else cfg.get(key, default)
        train_mode = pick(a.train_mode, "train_mode", "lora")
        opt_args = {"epsilon": float(pick(a.epsilon, "epsilon", 0.2)), "beta": float(pick(a.beta, "beta", 0.04)),
                    "temperature": float(pick(a.temperature, "temperature", 1.0))}
        if opt_args["temperature"] <= 0:
            raise Usage("--temperature must be positive")
        dtype = torch.float64 if (a.dtype or file_dtype) == "f64" else torch.float32
        model = Hybrid(cfg, tensors, dtype, train_mode, pick(a.lora_r, "lora_r", 4),
                       pick(a.lora_alpha, "lora_alpha", 8),
                       a.block, a.chunk)
        del tensors
        if old_in is not None and [len(o) for o in old_in] != [len(y) for y in responses]:
            raise Usage("%s: old_logprobs do not have one value per response token" % where)
    except Usage as e:
        sys.stderr.write("hybrid_torch: %s\n" % e)
        return 2
    base_rss_kib = current_rss_kib()
    opt = torch.optim.AdamW(list(model.trainable.values()), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    log("P=%d G=%d R=%s mode %s dtype %s threads %d%s" % (len(prompt), len(responses),
        [len(y) for y in responses], a.mode, "f64" if dtype == torch.float64 else "f32", a.threads,
        ", per-member backward" if a.per_member_backward else ""))
    try:
        res, grads = grpo_step(model, prompt, responses, [float(r) for r in rewards], old_in, opt_args, a.mode,
                               a.per_member_backward, opt, log)
    except (RuntimeError, MemoryError) as e:
        msg = str(e)
        if isinstance(e, MemoryError) or "alloc" in msg or "memory" in msg:
            sys.stderr.write("hybrid_torch: out of memory: %s\n" % (msg.splitlines()[0] if msg else type(e).__name__))
        else:
            sys.stderr.write("hybrid_torch: step failed: %s\n" % msg)
        return 1
    res["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res["base_rss_kib"] = base_rss_kib
    res.update({"mode": a.mode, "P": len(prompt), "G": len(responses), "threads": a.threads,
                "per_member_backward": a.per_member_backward})
    print("hybrid_torch: loss %.17g step %.2f s (reference scoring %.2f s) peak RSS %.1f MiB"
          % (res["loss"], res["step_s"], res["ref_s"], res["peak_rss_kib"] / 1024.0))
    if a.dump_grads:
        st_save(a.dump_grads, grads)
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, separators=(",", ":"))
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
