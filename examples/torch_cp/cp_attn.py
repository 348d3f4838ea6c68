"""Attention across context-parallel ranks.

Response queries (replicated on every rank) attend to each rank's prompt K/V shard, and on the owner
(the last rank) also to the response's own causal keys. Each rank's partial (out, lse) is merged with
one MAX all-reduce [lse_max] and two SUM all-reduces [lse_sum, out_sum] (docs/model.md §0, the
partial-attention merge). The backward sums dQ over ranks [dq_sum] and the owner's dK/dV of the
response keys [dkv_sum], so every rank continues with the same gradients; the prompt shard's dK/dV
stay on their rank (they belong to that rank's prompt backward).

Prompt queries (capture, prompt backward) attend to every earlier prompt key: the shards' K/V are
all-gathered [kv_allgather] and masked by global position; prompt_attn is plain autograd.
"""
import torch


def _scores(q, keys, tau):
    return tau * torch.einsum("rhd,shd->hrs", q, keys)


class MergedAttention(torch.autograd.Function):
    """o [R, Ha, hd] = softmax attention of q over (Kp, Vp) on every rank + causal (k, v) on the owner."""

    @staticmethod
    def forward(ctx, q, k, v, Kp, Vp, comm, layer, skip_dkv):
        tau = q.shape[-1] ** -0.5
        owner = comm.rank == comm.world - 1
        keys, vals = (torch.cat([Kp, k]), torch.cat([Vp, v])) if owner else (Kp, Vp)
        z = _scores(q, keys, tau)                                   # [Ha, R, S]
        if owner:
            R = q.shape[0]
            causal = torch.ones(R, R, dtype=torch.bool).tril()
            z[:, :, Kp.shape[0]:] = z[:, :, Kp.shape[0]:].masked_fill(~causal, float("-inf"))
        lse_local = torch.logsumexp(z, -1)                          # [Ha, R]
        m = lse_local.clone()
        comm.all_reduce(m, "max", "lse_max", layer)
        w = torch.exp(lse_local - m)
        a = w.clone()
        comm.all_reduce(a, "sum", "lse_sum", layer)
        p_local = torch.exp(z - lse_local[..., None])
        num = w[..., None] * torch.einsum("hrs,shd->hrd", p_local, vals)
        comm.all_reduce(num, "sum", "out_sum", layer)
        o = (num / a[..., None]).permute(1, 0, 2).contiguous()      # [R, Ha, hd]
        lse = m + torch.log(a)
        ctx.save_for_backward(q, k, v, Kp, Vp, o, lse)
        ctx.comm, ctx.layer, ctx.skip_dkv, ctx.owner = comm, layer, skip_dkv, owner
        return o

    @staticmethod
    def backward(ctx, dO):
        q, k, v, Kp, Vp, o, lse = ctx.saved_tensors
        comm, owner = ctx.comm, ctx.owner
        tau = q.shape[-1] ** -0.5
        keys, vals = (torch.cat([Kp, k]), torch.cat([Vp, v])) if owner else (Kp, Vp)
        z = _scores(q, keys, tau)
        if owner:
            R = q.shape[0]
            causal = torch.ones(R, R, dtype=torch.bool).tril()
            z[:, :, Kp.shape[0]:] = z[:, :, Kp.shape[0]:].masked_fill(~causal, float("-inf"))
        P = torch.exp(z - lse[..., None])                           # global probabilities, local keys
        dP = torch.einsum("rhd,shd->hrs", dO, vals)
        D = (dO * o).sum(-1).t()                                    # [Ha, R]
        dZ = P * (dP - D[..., None])
        dq = tau * torch.einsum("hrs,shd->rhd", dZ, keys).contiguous()
        comm.all_reduce(dq, "sum", "dq_sum", ctx.layer)
        dkeys = tau * torch.einsum("hrs,rhd->shd", dZ, q)
        dvals = torch.einsum("hrs,rhd->shd", P, dO)
        Tp = Kp.shape[0]
        dKp, dVp = dkeys[:Tp].contiguous(), dvals[:Tp].contiguous()
        if owner:
            dkv = torch.stack([dkeys[Tp:], dvals[Tp:]]).contiguous()
        else:
            dkv = torch.zeros((2,) + tuple(k.shape), dtype=q.dtype)
        if not ctx.skip_dkv:          # fault skip-dkv-reduce: non-owners keep zero response dK/dV
            comm.all_reduce(dkv, "sum", "dkv_sum", ctx.layer)
        return dq, dkv[0], dkv[1], dKp, dVp, None, None, None


def gather_kv(K, V, bounds, comm, layer):
    """All-gather every rank's prompt K/V shard (padded to the longest): [N, 2, maxT, Ha, hd]."""
    maxT = max(e - b for b, e in bounds)
    buf = K.new_zeros((2, maxT) + tuple(K.shape[1:]))
    buf[0, :K.shape[0]] = K
    buf[1, :V.shape[0]] = V
    out = [torch.empty_like(buf) for _ in range(comm.world)]
    comm.all_gather(out, buf, "kv_allgather", layer)
    return torch.stack(out)


def prompt_attn(q, G, bounds, rank):
    """Causal attention of this rank's prompt queries q [Tr, Ha, hd] over the gathered shards G."""
    tau = q.shape[-1] ** -0.5
    N, _, maxT = G.shape[:3]
    keys = G[:, 0].reshape((N * maxT,) + tuple(G.shape[3:]))
    vals = G[:, 1].reshape((N * maxT,) + tuple(G.shape[3:]))
    kpos = torch.full((N, maxT), -1, dtype=torch.long)
    valid = torch.zeros(N, maxT, dtype=torch.bool)
    for j, (b, e) in enumerate(bounds):
        kpos[j, :e - b] = torch.arange(b, e)
        valid[j, :e - b] = True
    kpos, valid = kpos.reshape(-1), valid.reshape(-1)
    qpos = torch.arange(bounds[rank][0], bounds[rank][1])
    allowed = valid[None, :] & (kpos[None, :] <= qpos[:, None])          # [Tr, S]
    z = _scores(q, keys, tau).masked_fill(~allowed[None], float("-inf"))
    return torch.einsum("hrs,shd->rhd", torch.softmax(z, -1), vals)
