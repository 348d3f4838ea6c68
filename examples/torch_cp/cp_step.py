"""One GRPO step under context parallelism: LongStraw's transaction on a PyTorch model.

capture     the prompt's P-1 positions once, without autograd, in contiguous shards over the ranks:
            a GDN layer receives its recurrent state from rank r-1 and hands its end state to r+1
            [state_handoff]; an attention layer all-gathers the shards' K/V [kv_allgather] and keeps
            its own shard for the responses. Then each GDN layer's final state is broadcast from the
            last rank [state_broadcast].
rollout     G responses sampled (replicated, seeded alike on every rank) unless the batch has them.
score       the old log-probs, one no-grad forward per member (unless the batch has them).
replay      each member under autograd, serially, replicated on every rank (cp_attn.MergedAttention).
prompt_bwd  (`full`) per layer from the top, each rank recomputes its shard from its checkpoint with
            autograd; GDN end-state gradients are handed r+1 -> r [state_grad_handoff], the gathered
            K/V gradients summed over ranks [dkv_allreduce].
finalize    replicated gradients (replay) counted once + the SUM over ranks of the shard-local ones
            (prompt_bwd) [grad_finalize, `full` only]; every rank's gradient digest gathered and
            compared [digest_check].
optimizer   AdamW or SGD, one step.
"""
import hashlib
import time

import torch
import torch.nn.functional as F

import cp_attn
import model as M
from evidence import digest_bytes

FAULTS = ("zero-state", "skip-dkv-reduce", "decay-grad", "loss-cp-scale", "fake-reduce")
# Declared faults that only the trace can show, no parity control: stale-handoff's sender changes its
# hand-off buffer before the send completed, and whether the receiver gets the stale state or the new
# one is the transport's timing (the numbers differ run to run); the sender's digests at issue and at
# completion differ every time (collectives.p2p).
TRACE_FAULTS = ("stale-handoff",)
# Data-parallel faults (--dp D > 1): dp-no-scale: the replicas' losses are not scaled by D, so DDP's
# average over the replicas leaves the replay gradient 1/D of the group's (parity's dp_grad).
DP_FAULTS = ("dp-no-scale",)
# CP bugs the parity adapter does NOT declare as controls (README.md, "Bugs the adapter does not
# declare"): each acts on a path the adapter's own batch never takes (uneven shards, a prompt the
# trainer samples for), so only evidence from the run's own path refuses them.
BUGS = ("last-shard-short", "stale-old-offset", "dkv-remainder-drop")
FLAGS = FAULTS + DP_FAULTS + TRACE_FAULTS + BUGS


def shard_bounds(T, N):
    return [(r * T // N, (r + 1) * T // N) for r in range(N)]


class Step:
    def __init__(self, W, comm, ev, cfg=M.CONFIG, grad_mode="full", faults=(), epsilon=0.2,
                 temperature=1.0, dp=None):
        """dp: data parallelism (None: one replica): .index and .size (this replica, D), .comm (a
        Comm over the ranks of this CP index in every replica) and .ddp (the DDP-wrapped Policy of
        W's tensors): this replica replays the members m with m % D == index, DDP averaging their
        gradients over the replicas."""
        for f in faults:
            if f not in FLAGS:
                raise ValueError(f"--fault: unknown fault '{f}' (one of {', '.join(FLAGS)})")
        self.W, self.comm, self.ev, self.cfg = W, comm, ev, cfg
        self.grad_mode, self.faults = grad_mode, set(faults)
        self.eps, self.temp = epsilon, temperature
        self.kinds = cfg["layers"]
        self.dtype = W["embed.weight"].dtype
        self.dp = dp if dp is not None and dp.size > 1 else None

    # ---------------------------------------------------------------- capture
    def capture(self, prompt):
        c, W, r, N = self.comm, self.W, self.comm.rank, self.comm.world
        T = len(prompt) - 1
        if T < N:
            raise ValueError(f"--batch: prompt of {len(prompt)} tokens has {T} captured positions, "
                             f"fewer than --cp {N}")
        self.bounds = shard_bounds(T, N)
        if "last-shard-short" in self.faults and T % N:   # bug: the last shard sized T // N (uneven only)
            b_last = self.bounds[-1][0]
            self.bounds[-1] = (b_last, b_last + T // N)
        b, e = self.bounds[r]
        self.shard_tokens = torch.tensor(prompt[b:e], dtype=torch.long)
        self.last_prompt_token = prompt[-1]
        self.ckpt, self.kv, self.final_state = [], {}, {}
        with torch.no_grad(), self.ev.phase("capture"):
            t0 = time.perf_counter_ns()
            h = W["embed.weight"][self.shard_tokens]
            self.ev.layer_end("capture", -1, -1, "embed", "fwd", e - b, h, t0)
            for i, kind in enumerate(self.kinds):
                t0 = time.perf_counter_ns()
                self.ckpt.append(h)
                h, S_start = self._prompt_layer_fwd(i, kind, h, capture=True)
                if kind == "gdn":
                    self.ckpt[-1] = (self.ckpt[-1], S_start)
                self.ev.layer_end("capture", -1, i, kind, "fwd", e - b, h, t0)
            for i, kind in enumerate(self.kinds):
                if kind == "gdn":
                    S = self.final_state[i]
                    c.broadcast(S, N - 1, "state_broadcast", i)

    def _prompt_layer_fwd(self, i, kind, h, capture, S_start=None):
        """One layer over this rank's shard. Returns (h_out, S_start or None)."""
        c, W, r, N = self.comm, self.W, self.comm.rank, self.comm.world
        xn = M.rmsnorm(h, W[f"layers.{i}.norm1.weight"], self.cfg["rms_eps"])
        P = M.layer_params(W, i, kind)
        if kind == "gdn":
            if capture:
                S_start = h.new_zeros(M.state_shape(self.cfg))
                c.handoff(None, -1, S_start, r - 1 if r > 0 else -1, "state_handoff", i)
                if "zero-state" in self.faults:        # the handed-over state is dropped
                    S_start = torch.zeros_like(S_start)
            out, S_end = M.gdn_scan(xn, S_start, P, self.cfg)
            if capture:
                stale = None
                if "stale-handoff" in self.faults and r < N - 1:   # the state before the shard's last token
                    stale = M.gdn_scan(xn[:-1], S_start, P, self.cfg)[1] if xn.shape[0] > 1 else S_start
                c.handoff(S_end, r + 1 if r < N - 1 else -1, None, -1, "state_handoff", i, stale=stale)
                self.final_state[i] = S_end.clone()
            return h + out, S_start
        q, K, V = M.attn_qkv(xn, P, self.cfg)
        G = cp_attn.gather_kv(K, V, self.bounds, c, i)
        if capture:
            self.kv[i] = (K.clone(), V.clone())
        o = cp_attn.prompt_attn(q, G, self.bounds, r)
        return h + o.reshape(o.shape[0], -1) @ P["o"].t(), None

    # ---------------------------------------------------------------- branch (rollout, score, replay)
    def branch(self, phase, member, tokens_in, targets, S_fin, KV, skip_dkv=False):
        """Log-probs [R] of TARGETS after TOKENS_IN, from the carried prompt state (replicated)."""
        W, cfg = self.W, self.cfg
        R = len(tokens_in)
        t0 = time.perf_counter_ns()
        h = W["embed.weight"][torch.tensor(tokens_in, dtype=torch.long)]
        self.ev.layer_end(phase, member, -1, "embed", "fwd", R, h, t0)
        for i, kind in enumerate(self.kinds):
            t0 = time.perf_counter_ns()
            h_in = h
            xn = M.rmsnorm(h, W[f"layers.{i}.norm1.weight"], cfg["rms_eps"])
            P = M.layer_params(W, i, kind)
            if kind == "gdn":
                out, _ = M.gdn_scan(xn, S_fin[i], P, cfg)
                h = h + out
            else:
                q, k, v = M.attn_qkv(xn, P, cfg)
                o = cp_attn.MergedAttention.apply(q, k, v, KV[i][0], KV[i][1], self.comm, i, skip_dkv)
                h = h + o.reshape(R, -1) @ P["o"].t()
            self.ev.layer_end(phase, member, i, kind, "fwd", R, h, t0)
            self._hook(h_in, phase, member, i, kind, R)
        t0 = time.perf_counter_ns()
        logits = M.rmsnorm(h, W["norm.weight"], cfg["rms_eps"]) @ W["lm_head.weight"].t()
        lp = F.log_softmax(logits / self.temp, -1)
        self.ev.layer_end(phase, member, len(self.kinds), "head", "fwd", R, logits, t0)
        self._hook(h, phase, member, len(self.kinds), "head", R)
        if targets is None:
            return lp
        return lp.gather(1, torch.tensor(targets, dtype=torch.long)[:, None])[:, 0]

    def _hook(self, x, phase, member, layer, kind, R):
        """A `bwd` layer_end when the gradient has passed back through LAYER (its input's gradient)."""
        if x.requires_grad and self.ev.w is not None:
            t0 = time.perf_counter_ns()
            x.register_hook(lambda g: self.ev.layer_end(phase, member, layer, kind, "bwd", R, g, t0))

    def rollout(self, G, R, seed):
        """G responses of R tokens sampled from the policy (same generator on every rank)."""
        gen = torch.Generator().manual_seed(seed)
        S_fin, KV = self.final_state, self.kv
        responses, self.sampler_logprobs = [], []
        stale = "stale-old-offset" in self.faults
        with torch.no_grad(), self.ev.phase("rollout"):
            for m in range(G):
                y, lps = [], []
                for t in range(R):
                    lp = self.branch("rollout", m, [self.last_prompt_token] + y, None, S_fin, KV)
                    y.append(int(torch.multinomial(lp[-1].exp().double(), 1, generator=gen)))
                    # the sampler's log-prob of its token; bug stale-old-offset: read one position early
                    lps.append(lp[max(t - 1, 0) if stale else -1, y[-1]])
                responses.append(y)
                self.sampler_logprobs.append(torch.stack(lps))
        return responses

    def score(self, responses):
        with torch.no_grad(), self.ev.phase("score"):
            return [self.branch("score", m, [self.last_prompt_token] + y[:-1], y,
                                self.final_state, self.kv) for m, y in enumerate(responses)]

    # ---------------------------------------------------------------- replay
    def replay(self, responses, advantages, old_lp, backward=True):
        """Serial replay under autograd; returns (log-probs per member, loss). Gradients in .grad.
        backward=False: the forward only (the gradient probe's loss, under torch.no_grad())."""
        full = self.grad_mode == "full" and backward
        N, G = self.comm.world, len(responses)
        S_fin = {i: S.detach().clone().requires_grad_(full) for i, S in self.final_state.items()}
        KV = {i: (K.detach().clone().requires_grad_(full), V.detach().clone().requires_grad_(full))
              for i, (K, V) in self.kv.items()}
        lps, loss_total = [], 0.0
        self.loss_scale = 0.0      # the sum of the loss terms' magnitudes (the probe's rounding scale)
        dp = self.dp if backward else None
        with self.ev.phase("replay"):
            for m, y in enumerate(responses):
                if dp is not None and m % dp.size != dp.index:
                    continue                # another replica's member
                def member_loss(m=m, y=y):
                    lp = self.branch("replay", m, [self.last_prompt_token] + y[:-1], y, S_fin, KV,
                                     skip_dkv="skip-dkv-reduce" in self.faults)
                    return lp, grpo_member_loss(lp, old_lp[m], advantages[m], self.eps, G)
                if dp is None:
                    lp, loss = member_loss()
                    applied = loss
                else:               # DDP around the CP model: its backward averages over the replicas
                    lp, loss = dp.ddp(member_loss)
                    applied = loss if "dp-no-scale" in self.faults else loss * dp.size
                if "loss-cp-scale" in self.faults:
                    loss = loss * N
                    applied = applied * N
                if not backward:
                    self.loss_scale += float(grpo_member_loss(lp, old_lp[m], advantages[m], self.eps, G,
                                                              magnitude=True)) * (N if "loss-cp-scale" in self.faults else 1)
                if backward:
                    t0 = time.perf_counter_ns()
                    applied.backward()
                    self.ev.layer_end("replay", m, -1, "embed", "bwd", len(y), self.W["embed.weight"].grad, t0)
                lps.append(lp.detach())
                loss_total += float(loss.detach())
            if dp is not None:      # the group's loss: the sum of the replicas' members
                t = torch.tensor([loss_total], dtype=torch.float64)
                dp.comm.all_reduce(t, "sum", "loss_sum")
                loss_total = float(t)
        self.dS_fin = {i: S.grad for i, S in S_fin.items()} if full else None
        self.dKV = {i: (K.grad, V.grad) for i, (K, V) in KV.items()} if full else None
        if full and dp is not None and "dp-no-scale" not in self.faults:
            # the loss was scaled by D for DDP's average over the parameters' gradients; the prompt
            # state's gradients are not averaged (the replicas' parts are summed in finalize): unscale
            for g in list(self.dS_fin.values()) + [x for kv in self.dKV.values() for x in kv]:
                if g is not None:
                    g.div_(dp.size)
        return lps, loss_total

    # ---------------------------------------------------------------- prompt backward
    def prompt_bwd(self):
        """Shard-local gradients of the prompt computation into .grad (`full` mode)."""
        c, W, r, N = self.comm, self.W, self.comm.rank, self.comm.world
        b, e = self.bounds[r]
        Tr = e - b
        dh = None
        with self.ev.phase("prompt_bwd"):
            for i in reversed(range(len(self.kinds))):
                kind = self.kinds[i]
                t0 = time.perf_counter_ns()
                if kind == "gdn":
                    h0, S0 = self.ckpt[i]
                else:
                    h0, S0 = self.ckpt[i], None
                h_in = h0.detach().clone().requires_grad_(True)
                with torch.enable_grad():
                    if kind == "gdn":
                        S_start = S0.detach().clone().requires_grad_(r > 0 and "zero-state" not in self.faults)
                        xn = M.rmsnorm(h_in, W[f"layers.{i}.norm1.weight"], self.cfg["rms_eps"])
                        out, S_end = M.gdn_scan(xn, S_start, M.layer_params(W, i, kind), self.cfg)
                        h_out = h_in + out
                        dS_end = torch.zeros_like(S_end)
                        c.handoff(None, -1, dS_end, r + 1 if r < N - 1 else -1, "state_grad_handoff", i)
                        if r == N - 1:
                            dS_end = self.dS_fin[i].clone()
                        torch.autograd.backward([h_out, S_end], [self._dh(dh, h_out), dS_end])
                        dS_start = S_start.grad if S_start.grad is not None else torch.zeros_like(S_start)
                        c.handoff(dS_start, r - 1 if r > 0 else -1, None, -1, "state_grad_handoff", i)
                    else:
                        P = M.layer_params(W, i, kind)
                        xn = M.rmsnorm(h_in, W[f"layers.{i}.norm1.weight"], self.cfg["rms_eps"])
                        q, K, V = M.attn_qkv(xn, P, self.cfg)
                        G = cp_attn.gather_kv(K.detach(), V.detach(), self.bounds, c, i)
                        G.requires_grad_(True)
                        o = cp_attn.prompt_attn(q, G, self.bounds, r)
                        h_out = h_in + o.reshape(Tr, -1) @ P["o"].t()
                        (dG,) = torch.autograd.grad(h_out, G, self._dh(dh, h_out), retain_graph=True)
                        dG = dG.contiguous()
                        c.all_reduce(dG, "sum", "dkv_allreduce", i)
                        T = self.bounds[-1][1]
                        if "dkv-remainder-drop" in self.faults and Tr > T // N:
                            dG[r, :, T // N:] = 0      # bug: the reduced K/V gradient read as T // N rows
                        dK = dG[r, 0, :Tr] + self.dKV[i][0]
                        dV = dG[r, 1, :Tr] + self.dKV[i][1]
                        torch.autograd.backward([h_out, K, V], [self._dh(dh, h_out), dK, dV])
                dh = h_in.grad
                self.ev.layer_end("prompt_bwd", -1, i, kind, "bwd", Tr, dh, t0)
                self.ev.layer_end("prompt_bwd", -1, i, kind, "fwd", Tr, h_out, t0, recompute=True)
            t0 = time.perf_counter_ns()
            with torch.enable_grad():
                emb = W["embed.weight"][self.shard_tokens]
                emb.backward(dh)
            self.ev.layer_end("prompt_bwd", -1, -1, "embed", "bwd", Tr, dh, t0)

    @staticmethod
    def _dh(dh, like):
        return torch.zeros_like(like) if dh is None else dh

    # ---------------------------------------------------------------- finalize
    def finalize(self, replicated, names):
        """The finalized gradient per name; returns (grads, digest disagreements)."""
        c, W = self.comm, self.W
        with self.ev.phase("finalize"):
            local = [W[n].grad if W[n].grad is not None else torch.zeros_like(W[n]) for n in names]
            if self.grad_mode == "full":
                flat = torch.cat([g.reshape(-1) for g in local])
                if "fake-reduce" in self.faults:
                    c.note("allreduce", "sum", flat, "grad_finalize")      # fault: logged, not performed
                else:
                    c.all_reduce(flat, "sum", "grad_finalize")
                if self.dp is not None:   # each replica's prompt backward had its own members' gradient
                    self.dp.comm.all_reduce(flat, "sum", "dp_prompt_sum")
                parts = flat.split([g.numel() for g in local])
                local = [p.reshape(g.shape) for p, g in zip(parts, local)]
            grads = {n: replicated[n] + g for n, g in zip(names, local)}
            if "decay-grad" in self.faults:        # the decay-term gradients corrupted after backward
                for n in names:
                    if n.endswith(".A_log") or n.endswith(".dt_bias"):
                        grads[n] = -grads[n]
            dig = torch.tensor(list(hashlib.sha256(digest_bytes([grads[n] for n in names])).digest()),
                               dtype=torch.uint8)
            out = [torch.empty_like(dig) for _ in range(c.world)]
            c.all_gather(out, dig, "digest_check")
            disagree = sum(1 for d in out if not torch.equal(d, out[0]))
            if self.dp is not None:   # and across the replicas
                out = [torch.empty_like(dig) for _ in range(self.dp.size)]
                self.dp.comm.all_gather(out, dig, "dp_digest_check")
                disagree += sum(1 for d in out if not torch.equal(d, out[0]))
        return grads, disagree


def advantages_of(rewards):
    r = torch.tensor(rewards, dtype=torch.float64)
    if len(rewards) < 2:
        return [0.0] * len(rewards)
    return ((r - r.mean()) / (r.std(unbiased=True) + 1e-4)).tolist()


def grpo_member_loss(lp, old_lp, adv, eps, G, magnitude=False):
    """(1/G)(1/R) sum_t -min(rho A, clip(rho, 1-eps, 1+eps) A), beta = 0 (docs/model.md §4);
    magnitude=True: its rounding scale instead, sum |dL/dlogp| |logp| (the gradient probe's, as
    longstraw-train's: the loss is near 0 at the step's own policy while its terms are not)."""
    rho = torch.exp(lp - old_lp)
    A = torch.as_tensor(adv, dtype=lp.dtype)
    obj = torch.minimum(rho * A, torch.clamp(rho, 1 - eps, 1 + eps) * A)
    if magnitude:
        return (rho * A).abs().mul(lp.abs()).sum() / (G * lp.shape[0])
    return -obj.sum() / (G * lp.shape[0])
