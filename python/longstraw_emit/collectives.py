"""torch.distributed wrappers called by hand (le.instrument intercepts the
trainer's own calls instead): every call performs the operation, then logs a
`collective` event (after the call, for its output digest: a rank stuck inside
a collective has no event for it) (docs/contract.md section 1) with the group's next gseq and,
for allreduce, broadcast and allgather, out_digest of this rank's output buffer
after the call; send and recv are point-to-point messages with their peer and
digests. Calls are synchronous (no async_op). note() records a collective the
trainer performed itself, below this API: the trainer's word (declared: true).
"""

from .digests import DTYPE_SIZE, buffer_digest, trace_dtype
from .intercept import original
from .run import SAME_OUTPUT_OPS

_RED = ("sum", "max", "min", "prod", "avg")


def _reduce_op(dist, op):
    return {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
            "prod": dist.ReduceOp.PRODUCT}[op]


def _desc(t):
    d = trace_dtype(t)
    n = t.numel()
    return n, d, n * DTYPE_SIZE[d]


class Collectives:
    """Collectives of one group of the writer's header. process_group: the
    torch.distributed group that implements it (None: the default group).
    The group's members must be the process group's ranks."""

    def __init__(self, writer, group, process_group=None):
        import torch.distributed as dist

        self.dist = dist
        self.writer = writer
        self.group = writer.group(group).name
        self.pg = process_group
        if dist.is_available() and dist.is_initialized():
            n = dist.get_world_size(process_group) if process_group is not None else dist.get_world_size()
            members = writer.group(group).members
            if n != len(members):
                raise ValueError(f"Collectives: group {group!r} has {len(members)} members, "
                                 f"its process group {n}")

    def _f(self, name):
        """torch.distributed's NAME (the original while le.instrument is active:
        these calls are logged here, not twice)."""
        return original(name, self.dist)

    def _log(self, op, red, t, purpose, layer, step, out=None, count=None, sent=None, peer=None, tag=None,
             declared=False, in_buf=None, in_digest=None):
        """count: elements of the operation (default t's); sent: elements this
        rank hands to other ranks (default count). bytes = sent x element
        size, 0 in a group of one (trainer/dist/comm.c's rule)."""
        if t is None:
            n, d = 0, "u8"
        else:
            n, d, _b = _desc(t)
        if count is not None:
            n = count
        sent = n if sent is None else sent
        b = 0 if len(self.writer.group(self.group).members) == 1 else sent * DTYPE_SIZE[d]
        alg = self.writer.digest_alg
        dig = None
        if (op in SAME_OUTPUT_OPS or op == "recv") and out is not None:
            dig = buffer_digest(out, alg)
        ind = buffer_digest(in_buf, alg) if in_buf is not None else in_digest
        return self.writer.collective(self.group, op, red, n, d, b, purpose, layer=layer, step=step,
                                      out_digest=dig, in_digest=ind, peer=peer, tag=tag, declared=declared)

    def _check_red(self, op):
        if op not in _RED:
            raise ValueError(f"collective.red: {op!r} is not one of {', '.join(_RED)}")

    def all_reduce(self, t, op="sum", purpose=None, layer=None, step=None):
        """In place. avg: a sum divided by the group size where the backend
        has no AVG (gloo, mpi)."""
        self._check_red(op)
        if purpose is None:
            raise ValueError("all_reduce: purpose is required")
        dist = self.dist
        if op == "avg":
            backend = dist.get_backend(self.pg) if self.pg is not None else dist.get_backend()
            if backend == "nccl":
                self._f("all_reduce")(t, op=dist.ReduceOp.AVG, group=self.pg)
            else:
                self._f("all_reduce")(t, op=dist.ReduceOp.SUM, group=self.pg)
                n = dist.get_world_size(self.pg) if self.pg is not None else dist.get_world_size()
                if t.is_floating_point():
                    t.div_(n)
                else:
                    t.floor_divide_(n)
        else:
            self._f("all_reduce")(t, op=_reduce_op(dist, op), group=self.pg)
        return self._log("allreduce", op, t, purpose, layer, step, out=t)

    def broadcast(self, t, src, purpose, layer=None, step=None):
        """src: a global rank, as torch.distributed.broadcast takes it."""
        self._f("broadcast")(t, src, group=self.pg)
        root = self.writer.rank == src
        return self._log("broadcast", "none", t, purpose, layer, step, out=t, sent=None if root else 0)

    def all_gather(self, out_list, t, purpose, layer=None, step=None):
        """count/bytes: this rank's contribution; out_sha256 over out_list in order."""
        self._f("all_gather")(out_list, t, group=self.pg)
        return self._log("allgather", "none", t, purpose, layer, step, out=list(out_list))

    def reduce_scatter(self, out, in_list, op="sum", purpose=None, layer=None, step=None):
        """count/bytes: the output's (this rank's shard). No out_sha256: each
        rank's shard differs."""
        self._check_red(op)
        if purpose is None:
            raise ValueError("reduce_scatter: purpose is required")
        if op == "avg":
            raise ValueError("reduce_scatter: avg is not supported; use sum and divide")
        self._f("reduce_scatter")(out, list(in_list), op=_reduce_op(self.dist, op), group=self.pg)
        return self._log("reduce_scatter", op, out, purpose, layer, step,
                         sent=sum(x.numel() for x in in_list))

    def all_to_all(self, out_list, in_list, purpose, layer=None, step=None):
        """count/bytes: the elements this rank sends (sum over in_list)."""
        self._f("all_to_all")(list(out_list), list(in_list), group=self.pg)
        n = sum(x.numel() for x in in_list)
        return self._log("all_to_all", "none", in_list[0] if in_list else None, purpose, layer, step, count=n)

    def send(self, t, dst, purpose, layer=None, step=None, tag=0):
        """A point-to-point message to global rank dst: in_digest of t as sent."""
        ind = buffer_digest(t, self.writer.digest_alg)    # what is handed off: digested at issue
        self._f("send")(t, dst, group=self.pg, tag=tag)
        return self._log("send", "none", t, purpose, layer, step, peer=dst, tag=tag, in_digest=ind)

    def recv(self, t, src, purpose, layer=None, step=None, tag=0):
        """A point-to-point message from global rank src: out_digest of t as received."""
        self._f("recv")(t, src, group=self.pg, tag=tag)
        return self._log("recv", "none", t, purpose, layer, step, out=t, sent=0, peer=src, tag=tag)


    def barrier(self, purpose, step=None):
        self._f("barrier")(group=self.pg)
        return self._log("barrier", "none", None, purpose, None, step)

    def ddp_comm_hook(self, purpose="grad_allreduce", step=None):
        """A DistributedDataParallel communication hook that reduces every
        gradient bucket through all_reduce(op="avg") of this wrapper, so DDP's
        reductions appear in the trace (with out_sha256):
            model.register_comm_hook(None, cp.ddp_comm_hook("grad_allreduce", step=lambda: step))
        step: an int, a callable returning one, or None. The reduction runs
        synchronously inside the hook (no overlap with the rest of the backward):
        evidence over speed."""
        import torch

        def hook(state, bucket):
            s = step() if callable(step) else step
            buf = bucket.buffer()
            self.all_reduce(buf, op="avg", purpose=purpose, step=s)
            fut = torch.futures.Future()
            fut.set_result(buf)
            return fut

        return hook

    def note(self, op, red, tensor, purpose, layer=None, step=None, performed_output=None, peer=None, tag=None):
        """Record a collective performed below Python (a fused kernel, a C++
        extension, NCCL called directly): nothing is communicated here; the
        event is the trainer's word and says so (declared: true). out_digest
        (allreduce, broadcast, allgather, recv) digests performed_output if
        given (a tensor or a list of tensors), else tensor as it stands now:
        when the operation was not really performed, the ranks' digests differ
        and the audit sees it. A send's in_digest digests tensor; send and recv
        need their peer."""
        out = performed_output if performed_output is not None else tensor
        sent = 0 if op in ("recv", "barrier") else None
        return self._log(op, red, tensor, purpose, layer, step, out=out, sent=sent, peer=peer, tag=tag,
                         declared=True, in_buf=tensor if op == "send" else None)
