"""The example's instrumentation: a v2 run directory through longstraw_emit (python/ in the repo),
or nothing at all (`--no-evidence`, and the in-process numeric tests).

Comm is the one door to torch.distributed, and it calls torch.distributed itself: with a writer,
`le.instrument(writer)` intercepts every call (the collectives, the point-to-point state hand-offs,
their output and input digests) and Comm only names each call's purpose and layer
(`inst.context`). Without one it is the plain call. `note` records a collective that was NOT
performed (the fake-reduce fault): a `Collectives.note`, the trainer's word (`declared: true`).
"""
import contextlib
import os
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
PHASES = ["capture", "rollout", "score", "replay", "prompt_bwd", "finalize", "optimizer"]
LAYER_KINDS = ["embed", "gdn", "attn", "head"]
_RED = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}


def import_emitter():
    """The longstraw_emit module (installed or on PYTHONPATH, else the repository's python/), or None."""
    try:
        import longstraw_emit
        return longstraw_emit
    except ImportError:
        pass
    repo_py = os.path.join(HERE, "..", "..", "python")
    if os.path.isdir(os.path.join(repo_py, "longstraw_emit")):
        sys.path.insert(0, os.path.abspath(repo_py))
        import longstraw_emit
        return longstraw_emit
    return None


class Comm:
    """Collectives and hand-offs over the CP group (all ranks). With an instrumentation (`inst`,
    le.instrument's) every torch.distributed call below is recorded by it; Comm names its purpose
    and layer. On one rank there is nothing to communicate: every reduction is the identity,
    nothing is called and nothing is logged (a one-rank run traces no collective, docs/audit.md
    sources.agree)."""

    def __init__(self, rank, world, inst=None, declare=None, group=None, ranks=None):
        """RANK of WORLD: this process's index in the group; GROUP: its torch.distributed process
        group (None: the default group); RANKS: the group's global ranks by index (peers and roots
        are given as indices)."""
        self.rank, self.world, self.inst, self.declare, self.step = rank, world, inst, declare, 0
        self.group = group
        self.ranks = list(ranks) if ranks is not None else list(range(world))

    def _ctx(self, purpose, layer):
        if self.inst is None:
            return contextlib.nullcontext()
        return self.inst.context(purpose=purpose, layer=layer, step=self.step)

    def all_reduce(self, t, red, purpose, layer=None):
        if self.world == 1:
            return
        with self._ctx(purpose, layer):
            dist.all_reduce(t, op=_RED[red], group=self.group)

    def all_gather(self, out, t, purpose, layer=None):
        if self.world == 1:
            out[0].copy_(t)
            return
        with self._ctx(purpose, layer):
            dist.all_gather(out, t, group=self.group)

    def broadcast(self, t, src, purpose, layer=None):
        if self.world == 1:
            return
        with self._ctx(purpose, layer):
            dist.broadcast(t, self.ranks[src], group=self.group)

    def handoff(self, send_t, dst, recv_t, src, purpose, layer=None, stale=None):
        """A hand-off along the ranks: send SEND_T to DST and/or receive into RECV_T from SRC (-1: no
        peer), point-to-point messages the audit pairs (collectives.p2p: every send has its receive,
        the sender's input digest the receiver's output digest). STALE (the stale-handoff fault): the
        sender issues the send of a buffer holding STALE and only then writes SEND_T into it, before
        the send completed: the receiver is handed the state before its last update."""
        if self.world == 1:
            return
        with self._ctx(purpose, layer):
            if dst >= 0:
                if stale is None:
                    dist.send(send_t.contiguous(), self.ranks[dst], group=self.group)
                else:
                    buf = stale.clone().contiguous()
                    work = dist.isend(buf, self.ranks[dst], group=self.group)
                    buf.copy_(send_t)      # the last update lands after the hand-off was issued
                    work.wait()
            if src >= 0:
                dist.recv(recv_t, self.ranks[src], group=self.group)

    def note(self, op, red, t, purpose, layer=None):
        if self.declare is not None and self.world > 1:
            self.declare.note(op, red, t, purpose=purpose, layer=layer, step=self.step)

    def barrier(self, purpose):
        if self.world == 1:
            return
        with self._ctx(purpose, None):
            dist.barrier(group=self.group)


class Evidence:
    """Trace events of one rank; a no-op when WRITER is None."""

    def __init__(self, writer=None):
        self.w = writer

    @contextlib.contextmanager
    def phase(self, name, step=0):
        if self.w is None:
            yield
            return
        with self.w.phase(name, step=step):
            yield

    def layer_end(self, phase, member, layer, kind, direction, tokens, out, t0, recompute=False):
        if self.w is None:
            return
        norm = float(out.detach().double().norm()) if out is not None else 0.0
        nbytes = out.numel() * out.element_size() if out is not None else 0
        self.w.layer_end(phase, 0, member, layer, kind, direction, tokens, norm,
                         wall_ns=time.perf_counter_ns() - t0, live_bytes=nbytes, peak_bytes=nbytes,
                         recompute=recompute)

    def step_metrics(self, objective, **metrics):
        if self.w is not None:
            self.w.step_metrics(0, objective, **metrics)

    def param_digests(self, named):
        if self.w is not None:
            self.w.param_digests(0, named)

    def optimizer_step(self, **fields):
        if self.w is not None:
            self.w.optimizer_step(0, **fields)


def group_names(comm):
    """The header names of this rank's CP and DP groups: "cp" (and no DP) for one replica; with data
    parallelism one name per group instance, as docs/contract.md §2 lays them out (dp_ranks): cp-dD
    (replica D's CP group) and dp-cC (CP index C's ranks in every replica)."""
    if comm.dp is None:
        return "cp", None
    return f"cp-d{comm.dp.index}", f"dp-c{comm.rank}"


def open_writer(le, run_dir, rank, world, config, profile_path, cp_ranks=None, dp_ranks=None, names=("cp", None)):
    """A longstraw_emit RunWriter for global rank RANK of WORLD of the run in RUN_DIR: groups world,
    NAMES[0] (kind cp: this rank's CP group, CP_RANKS; default every rank) and, with data parallelism,
    NAMES[1] (kind dp: the ranks of this CP index in every replica, DP_RANKS)."""
    members = list(range(world))
    groups = [le.Group("world", "world", members), le.Group(names[0], "cp", list(cp_ranks or members))]
    if dp_ranks is not None:
        groups.append(le.Group(names[1], "dp", list(dp_ranks)))
    return le.RunWriter(run_dir, rank, world, config.get("run_id", "run-torch-cp"), "torch-cp",
                        profile_path, tool="torch_cp", groups=groups,
                        phases=PHASES, layer_kinds=LAYER_KINDS,
                        config={k: v for k, v in config.items() if k != "run_id"},
                        artifacts=build_artifacts(le, run_dir), compress=True)


def build_artifacts(le, run_dir):
    """What ran: the interpreter, the emitter's code and this example's by content (wherever
    they were loaded from: the emitter installed or on PYTHONPATH, the example in or out of a git
    tree, the same files are the same identity), torch and its native libraries, and the
    environment that changes the computation: OMP_NUM_THREADS, and TORCH_CP_BUG (a fault compiled
    in, as a bug in the code would be: the run does not declare it, but its build identity differs
    from the clean build's)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return le.collect_artifacts(code=[here], packages=("torch",),
                                env=("OMP_NUM_THREADS", "TORCH_CP_BUG"), exclude=(run_dir,))


def digest_bytes(tensors):
    """The finalized gradient's bytes for the digest check."""
    return b"".join(t.detach().contiguous().numpy().tobytes() for t in tensors)


def torch_dtype(name):
    return {"f64": torch.float64, "f32": torch.float32}[name]
