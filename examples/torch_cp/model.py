"""The example's model (docs/model.md, simplified where noted in README.md) and its per-layer pieces.

Layers: embedding, a stack of blocks `h = h + Mixer(RMSNorm(h))` whose mixer is a GDN-like recurrent
layer ("gdn") or causal softmax attention ("attn"), then a final RMSNorm and an untied head.
The trainer (cp_step.py) composes these pieces across ranks; reference.py does not import this file.
"""
import math

import torch
import torch.nn.functional as F

CONFIG = {"family": "torch-cp", "vocab": 32, "d_model": 16, "layers": ["gdn", "attn", "gdn"],
          "gdn_heads": 2, "gdn_dk": 8, "gdn_dv": 8, "attn_heads": 2, "head_dim": 8, "rms_eps": 1e-6}


def param_shapes(cfg=CONFIG):
    """Ordered dict NAME -> shape of every (trainable) tensor."""
    V, d = cfg["vocab"], cfg["d_model"]
    H, dk, dv = cfg["gdn_heads"], cfg["gdn_dk"], cfg["gdn_dv"]
    Ha, hd = cfg["attn_heads"], cfg["head_dim"]
    s = {"embed.weight": [V, d]}
    for i, kind in enumerate(cfg["layers"]):
        p = f"layers.{i}."
        s[p + "norm1.weight"] = [d]
        if kind == "gdn":
            s[p + "gdn.in_qkv.weight"] = [2 * H * dk + H * dv, d]
            s[p + "gdn.in_b.weight"] = [H, d]
            s[p + "gdn.in_a.weight"] = [H, d]
            s[p + "gdn.A_log"] = [H]
            s[p + "gdn.dt_bias"] = [H]
            s[p + "gdn.out.weight"] = [d, H * dv]
        else:
            for n in ("q", "k", "v"):
                s[p + f"attn.{n}.weight"] = [Ha * hd, d]
            s[p + "attn.o.weight"] = [d, Ha * hd]
    s["norm.weight"] = [d]
    s["lm_head.weight"] = [V, d]
    return s


def init_weights(seed, cfg=CONFIG):
    """Deterministic float64 weights from SEED (norm weights near 1, decay terms of both signs)."""
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith("norm1.weight") or name == "norm.weight":
            t = 1.0 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif name.endswith("A_log"):
            t = -0.5 + 0.5 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif name.endswith("dt_bias"):
            t = 0.5 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif name == "embed.weight":
            t = torch.randn(shape, generator=g, dtype=torch.float64)
        else:
            t = torch.randn(shape, generator=g, dtype=torch.float64) / math.sqrt(shape[1])
        w[name] = t
    return w


def rmsnorm(x, w, eps):
    return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def gdn_scan(x, S, P, cfg=CONFIG):
    """GDN mixer over tokens x [T, d] from state S [H, dk, dv]; returns (out [T, d], S_end).

    Per token: c = silu(in_qkv x) split q|k|v, q and k L2-normalised per head, q scaled by dk^-1/2;
    beta = sigmoid(in_b x), g = -exp(A_log) * softplus(in_a x + dt_bias);
    S^ = e^g S; u = S^T k; delta = beta (v - u); S = S^ + k delta^T; o = S^T q.
    """
    H, dk, dv = cfg["gdn_heads"], cfg["gdn_dk"], cfg["gdn_dv"]
    c = F.silu(x @ P["in_qkv"].t())
    q = c[:, :H * dk].reshape(-1, H, dk)
    k = c[:, H * dk:2 * H * dk].reshape(-1, H, dk)
    v = c[:, 2 * H * dk:].reshape(-1, H, dv)
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) * dk ** -0.5
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    beta = torch.sigmoid(x @ P["in_b"].t())
    g = -torch.exp(P["A_log"]) * F.softplus(x @ P["in_a"].t() + P["dt_bias"])
    outs = []
    for t in range(x.shape[0]):
        Sh = torch.exp(g[t])[:, None, None] * S
        u = torch.einsum("hkv,hk->hv", Sh, k[t])
        delta = beta[t][:, None] * (v[t] - u)
        S = Sh + k[t][:, :, None] * delta[:, None, :]
        outs.append(torch.einsum("hkv,hk->hv", S, q[t]).reshape(-1))
    o = torch.stack(outs) if outs else x.new_zeros(0, H * dv)
    return o @ P["out"].t(), S


def attn_qkv(x, P, cfg=CONFIG):
    """Queries, keys, values [T, Ha, hd] of tokens x [T, d]."""
    Ha, hd = cfg["attn_heads"], cfg["head_dim"]
    return tuple((x @ P[n].t()).reshape(-1, Ha, hd) for n in ("q", "k", "v"))


def layer_params(W, i, kind):
    """The mixer's tensors of layer I under short names (views into W, autograd intact)."""
    p = f"layers.{i}.{kind}."
    if kind == "gdn":
        return {n: W[p + (n if n in ("A_log", "dt_bias") else n + ".weight")]
                for n in ("in_qkv", "in_b", "in_a", "A_log", "dt_bias", "out")}
    return {n: W[p + n + ".weight"] for n in ("q", "k", "v", "o")}


def state_shape(cfg=CONFIG):
    return [cfg["gdn_heads"], cfg["gdn_dk"], cfg["gdn_dv"]]
