"""le.instrument(w): every torch.distributed call of the process written as a
`collective` event, without wrapping the trainer's calls by hand.

instrument() replaces the communication functions of torch.distributed (and of
torch.distributed.distributed_c10d, where torch's own Python helpers look them
up) with wrappers that perform the original call and record it:

- the group: the header group the call's process group implements (the
  `groups` mapping, else the one header group with the process group's ranks);
  a call on a process group no header group names is refused before it runs;
- purpose, layer and step from `inst.context(...)` (default: the function's
  name, no layer, the writer's open phase's step);
- out_digest ("ALG:HEX", digests.buffer_digest) of the output every member
  must hold alike (allreduce, broadcast, allgather) and of a received buffer,
  in_digest of a sent buffer when the send is issued (and in_digest_done when
  the buffer changed before the send completed), taken when the work
  completes: at once for a blocking call, at wait(), is_completed() or the
  future's completion for async_op=True, isend, irecv and batch_isend_irecv;
- point-to-point messages (send, recv, isend, irecv, batch_isend_irecv) with
  their peer, tag and the channel's sequence number (docs/contract.md §1);
- DistributedDataParallel's bucket reductions through a communication hook
  registered at the model's first forward (unless the trainer registered its
  own Python hook, whose calls are intercepted like any other).

An event is written when its call completes, in the order the calls were
issued per group and per channel (a completed call waits for the earlier
calls of its group), so an async call's event belongs to the phase in which
it completes. What runs below Python (C++ extensions, NCCL called directly,
DDP's built-in C++ hooks, FSDP's internals) is not seen: the trainer declares
it with Collectives.note(), and the event says `declared: true`.
"""

import contextlib
import threading

from .digests import DTYPE_SIZE, buffer_digest, check_digest_alg, trace_dtype
from .run import P2P_OPS, SAME_OUTPUT_OPS

# torch.distributed functions replaced, by the recorder that describes them.
_FUNCS = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "_all_gather_base", "reduce_scatter",
          "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single", "reduce", "barrier",
          "monitored_barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv")

_ACTIVE = None          # the one Instrumentation of the process
_ACTIVE_LOCK = threading.Lock()


def original(name, dist=None):
    """The torch.distributed function NAME as torch defines it (the wrapper's
    original while instrumented), else DIST's (default torch.distributed): the
    wrappers of collectives.py call these, so nothing is recorded twice."""
    inst = _ACTIVE
    if inst is not None and name in inst._orig:
        return inst._orig[name]
    if dist is None:
        import torch.distributed as dist
    return getattr(dist, name)


def active():
    """The process's Instrumentation, or None."""
    return _ACTIVE


class _Call:
    """One intercepted call: what to record once its work completes."""

    def __init__(self, inst, group, op, red, count, dtype, nbytes, purpose, layer, step, out=None, sent=None,
                 peer=None, tag=0, recv_src_pg=None):
        self.inst, self.group, self.op, self.red = inst, group, op, red
        self.count, self.dtype, self.nbytes = count, dtype, nbytes
        self.purpose, self.layer, self.step = purpose, layer, step
        self.out, self.sent, self.peer, self.tag = out, sent, peer, tag
        self.recv_src_pg = recv_src_pg      # an any-source receive: its process group
        self.in_digest = None
        self.settled = False
        self.key = self.k = None
        self.proxy = None

    def reserve(self):
        """The call's sequence number, reserved when it is issued (an
        any-source receive reserves at completion, when its peer is known)."""
        w = self.inst.w
        if self.op in P2P_OPS:
            if self.peer is None:
                return
            self.k = w.next_p2p_seq(self.group, self.peer, self.op == "send", self.tag)
        else:
            self.k = w.next_gseq(self.group)
        self.key = w._collective_key(self.group, self.op, self.peer, self.tag)
        with self.inst.plock:
            self.inst.pending[id(self)] = self

    def done(self, source_rank=None):
        """The work completed: digest what it left and write the event (in order)."""
        inst = self.inst
        with inst.plock:
            if self.settled:
                return
            self.settled = True
            inst.pending.pop(id(self), None)
        if self.peer is None and self.op == "recv":
            self.peer = inst._global(self.recv_src_pg, source_rank)
            self.reserve()
            with inst.plock:
                inst.pending.pop(id(self), None)
        kw = dict(group=self.group, op=self.op, red=self.red, count=self.count, dtype=self.dtype, bytes=self.nbytes,
                  purpose=self.purpose, layer=self.layer, step=self.step)
        alg = inst.alg
        if self.op == "send":
            kw["in_digest"] = self.in_digest
            now = buffer_digest(self.sent, alg) if self.sent is not None else None
            if now is not None and now != self.in_digest:
                kw["in_digest_done"] = now
        if self.out is not None and (self.op in SAME_OUTPUT_OPS or self.op == "recv"):
            kw["out_digest"] = buffer_digest(self.out, alg)
        if self.op in P2P_OPS:
            kw["peer"] = self.peer
            kw["tag"] = self.tag
        fields, _key = inst.w._collective_fields(**kw)
        inst.w._settle(self.key, self.k, fields)


class _Work:
    """An async call's work handle: torch's, which settles the call when it
    completes (wait(), is_completed() true, or the future's completion)."""

    def __init__(self, work, call):
        self._work = work
        self._call = call
        call.proxy = self

    def wait(self, *a, **kw):
        r = self._work.wait(*a, **kw)
        self._settle()
        return r

    def is_completed(self):
        c = self._work.is_completed()
        if c:
            self._settle()
        return c

    def get_future(self):
        def then(fut):
            self._settle()
            return fut.value()
        return self._work.get_future().then(then)

    def _settle(self):
        src = None
        if self._call.peer is None and self._call.op == "recv":
            try:
                src = self._work.source_rank()
            except Exception:  # noqa: BLE001 - torch raises RuntimeError for a work without one
                src = None
        self._call.done(src)

    def __getattr__(self, name):  # source_rank, result, exception, synchronize, ...
        return getattr(self._work, name)


def _red(dist, op):
    R = dist.ReduceOp
    for name, v in (("sum", R.SUM), ("max", R.MAX), ("min", R.MIN), ("prod", R.PRODUCT)):
        if op == v:
            return name
    if hasattr(R, "AVG") and op == R.AVG:
        return "avg"
    raise ValueError(f"instrument: reduction {op!r} has no trace name (sum, max, min, prod, avg)")


def _desc(t):
    d = trace_dtype(t)
    return t.numel(), d


class Instrumentation:
    """What instrument() returns: remove() (or leaving the `with` block) puts
    torch.distributed back; context() and paused() steer what is recorded."""

    def __init__(self, writer, groups=None, digest=None, ddp_purpose="grad_allreduce"):
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        self.w = writer
        self.dist, self.c10d = dist, c10d
        self.alg = check_digest_alg("instrument.digest", digest if digest is not None else writer.digest_alg)
        self.ddp_purpose = ddp_purpose
        self.pending = {}   # id -> _Call: issued, not yet settled
        self.plock = threading.Lock()
        self._ctx = []
        self._paused = 0
        self._lock = threading.Lock()
        self._groups = {}   # id(process group) -> header group name; None key: the default group
        for name, pg in (groups or {}).items():
            g = writer.group(name)
            if pg is not None and dist.is_initialized():
                n = dist.get_world_size(pg)
                if n != len(g.members):
                    raise ValueError(f"instrument.groups[{name!r}]: the header group has {len(g.members)} members, "
                                     f"its process group {n}")
            self._groups[id(pg) if pg is not None else None] = name
        self._orig = {}
        self._ddp = None

    # ---- what is recorded ------------------------------------------------------
    @contextlib.contextmanager
    def context(self, purpose=None, layer=None, step=None):
        """Calls inside the block are recorded with this purpose, layer and
        step (nested blocks inherit what they leave None)."""
        top = self._ctx[-1] if self._ctx else (None, None, None)
        self._ctx.append((purpose if purpose is not None else top[0], layer if layer is not None else top[1],
                          step if step is not None else top[2]))
        try:
            yield self
        finally:
            self._ctx.pop()

    @contextlib.contextmanager
    def paused(self):
        """Calls inside the block are performed and not recorded (a probe's
        re-evaluations of the loss are no part of the step's transaction)."""
        with self._lock:
            self._paused += 1
        try:
            yield self
        finally:
            with self._lock:
                self._paused -= 1

    def _labels(self, fname):
        purpose, layer, step = self._ctx[-1] if self._ctx else (None, None, None)
        if step is None and self.w._open_phases:
            step = self.w._open_phases[-1][1]
        return purpose or fname.lstrip("_"), layer, step

    # ---- process groups --------------------------------------------------------
    def _pg(self, group):
        c = self.c10d
        if group is None or group is c.GroupMember.WORLD:
            return None
        return group

    def _group(self, pg):
        key = id(pg) if pg is not None else None
        name = self._groups.get(key)
        if name is not None:
            return name
        dist = self.dist
        ranks = sorted(dist.get_process_group_ranks(pg)) if pg is not None else list(range(dist.get_world_size()))
        match = [g.name for g in self.w.groups if sorted(g.members) == ranks]
        if len(match) != 1:
            why = "no header group has" if not match else f"header groups {match} all have"
            raise ValueError(f"instrument: a torch.distributed call on the process group of ranks {ranks}: {why} "
                             "these members; name it: le.instrument(w, groups={name: process_group})")
        self._groups[key] = match[0]
        return match[0]

    def _global(self, pg, r):
        if r is None or r < 0:
            raise ValueError("instrument: a receive from any source completed without its source rank")
        return r if pg is None else self.c10d._get_global_rank(pg, r)

    def _nbytes(self, group, elements, dtype):
        return 0 if len(self.w.group(group).members) == 1 else elements * DTYPE_SIZE[dtype]

    # ---- the wrappers -------------------------------------------------------------
    def _run(self, fname, call, args, kw, async_op):
        """Reserve, perform, settle (blocking) or hand back a settling work."""
        call.reserve()
        if call.op == "send":
            call.in_digest = buffer_digest(call.sent, self.alg)
        try:
            r = self._orig[fname](*args, **kw)
        except BaseException:
            self._forget(call)
            raise
        if async_op:
            return _Work(r, call) if r is not None else r
        src = r if (call.op == "recv" and isinstance(r, int)) else None
        call.done(src)
        return r

    def _forget(self, call):
        """A call that raised before it communicated: no event, its number given back."""
        with self.plock:
            self.pending.pop(id(call), None)
            call.settled = True
        if call.key is not None:
            self.w._unreserve(call.key, call.k)

    def _wrap(self, fname):
        orig = self._orig[fname]
        rec = getattr(self, "_rec_" + fname.lstrip("_"))

        def wrapper(*args, **kw):
            if self._paused:
                return orig(*args, **kw)
            return rec(fname, *args, **kw)

        wrapper.__name__ = fname
        wrapper.__doc__ = orig.__doc__
        wrapper.__wrapped__ = orig
        return wrapper

    def _coll(self, fname, op, red, t, out, sent, group, args, kw, async_op, count=None):
        pg = self._pg(group)
        g = self._group(pg)
        n, d = _desc(t) if t is not None else (0, "u8")
        if count is not None:
            n = count
        purpose, layer, step = self._labels(fname)
        call = _Call(self, g, op, red, n, d, self._nbytes(g, n if sent is None else sent, d), purpose, layer, step,
                     out=out)
        return self._run(fname, call, args, kw, async_op)

    def _rec_all_reduce(self, fname, tensor, op=None, group=None, async_op=False):
        d = self.dist
        op = d.ReduceOp.SUM if op is None else op
        return self._coll(fname, "allreduce", _red(d, op), tensor, tensor, None, group, (tensor,),
                          dict(op=op, group=group, async_op=async_op), async_op)

    def _rec_broadcast(self, fname, tensor, src, group=None, async_op=False):
        sent = None if self.w.rank == src else 0
        return self._coll(fname, "broadcast", "none", tensor, tensor, sent, group, (tensor, src),
                          dict(group=group, async_op=async_op), async_op)

    def _rec_all_gather(self, fname, tensor_list, tensor, group=None, async_op=False):
        return self._coll(fname, "allgather", "none", tensor, list(tensor_list), None, group, (tensor_list, tensor),
                          dict(group=group, async_op=async_op), async_op)

    def _rec_all_gather_into_tensor(self, fname, output_tensor, input_tensor, group=None, async_op=False):
        return self._coll(fname, "allgather", "none", input_tensor, output_tensor, None, group,
                          (output_tensor, input_tensor), dict(group=group, async_op=async_op), async_op)

    _rec_all_gather_base = _rec_all_gather_into_tensor

    def _rec_reduce_scatter(self, fname, output, input_list, op=None, group=None, async_op=False):
        d = self.dist
        op = d.ReduceOp.SUM if op is None else op
        sent = sum(x.numel() for x in input_list)
        return self._coll(fname, "reduce_scatter", _red(d, op), output, None, sent, group, (output, input_list),
                          dict(op=op, group=group, async_op=async_op), async_op)

    def _rec_reduce_scatter_tensor(self, fname, output, input, op=None, group=None, async_op=False):
        d = self.dist
        op = d.ReduceOp.SUM if op is None else op
        return self._coll(fname, "reduce_scatter", _red(d, op), output, None, input.numel(), group, (output, input),
                          dict(op=op, group=group, async_op=async_op), async_op)

    _rec_reduce_scatter_base = _rec_reduce_scatter_tensor

    def _rec_all_to_all(self, fname, output_tensor_list, input_tensor_list, group=None, async_op=False):
        n = sum(x.numel() for x in input_tensor_list)
        first = input_tensor_list[0] if len(input_tensor_list) else None
        return self._coll(fname, "all_to_all", "none", first, None, None, group,
                          (output_tensor_list, input_tensor_list), dict(group=group, async_op=async_op), async_op,
                          count=n)

    def _rec_all_to_all_single(self, fname, output, input, output_split_sizes=None, input_split_sizes=None,
                               group=None, async_op=False):
        return self._coll(fname, "all_to_all", "none", input, None, None, group, (output, input),
                          dict(output_split_sizes=output_split_sizes, input_split_sizes=input_split_sizes,
                               group=group, async_op=async_op), async_op)

    def _rec_reduce(self, fname, tensor, dst, op=None, group=None, async_op=False):
        d = self.dist
        op = d.ReduceOp.SUM if op is None else op
        return self._coll(fname, "reduce", _red(d, op), tensor, None, None, group, (tensor, dst),
                          dict(op=op, group=group, async_op=async_op), async_op)

    def _rec_barrier(self, fname, group=None, async_op=False, device_ids=None):
        kw = dict(group=group, async_op=async_op)
        if device_ids is not None:
            kw["device_ids"] = device_ids
        return self._coll(fname, "barrier", "none", None, None, 0, group, (), kw, async_op)

    def _rec_monitored_barrier(self, fname, group=None, timeout=None, wait_all_ranks=False):
        return self._coll(fname, "barrier", "none", None, None, 0, group, (),
                          dict(group=group, timeout=timeout, wait_all_ranks=wait_all_ranks), False)

    def _p2p(self, fname, op, tensor, peer, group, tag, async_op):
        pg = self._pg(group)
        g = self._group(pg)
        n, d = _desc(tensor)
        purpose, layer, step = self._labels(fname)
        call = _Call(self, g, op, "none", n, d, self._nbytes(g, n, d) if op == "send" else 0, purpose, layer, step,
                     out=tensor if op == "recv" else None, sent=tensor if op == "send" else None, peer=peer, tag=tag,
                     recv_src_pg=pg)
        args = (tensor, peer) if op == "send" or peer is not None else (tensor,)
        return self._run(fname, call, args, dict(group=group, tag=tag), async_op)

    def _rec_send(self, fname, tensor, dst, group=None, tag=0):
        return self._p2p(fname, "send", tensor, dst, group, tag, False)

    def _rec_recv(self, fname, tensor, src=None, group=None, tag=0):
        return self._p2p(fname, "recv", tensor, src, group, tag, False)

    def _rec_isend(self, fname, tensor, dst, group=None, tag=0):
        return self._p2p(fname, "send", tensor, dst, group, tag, True)

    def _rec_irecv(self, fname, tensor, src=None, group=None, tag=0):
        return self._p2p(fname, "recv", tensor, src, group, tag, True)

    def _rec_batch_isend_irecv(self, fname, p2p_op_list):
        """Each op recorded as its isend or irecv (reserved in list order), the
        batch performed by torch's own batch_isend_irecv with the original
        functions, each returned work settling its call."""
        c = self.c10d
        ops = list(p2p_op_list)
        if not ops:
            return self._orig[fname](ops)
        calls, raw = [], []
        sends = (self._orig["isend"], c.isend, self._wrapped.get("isend"))
        for i, o in enumerate(ops):
            is_send = o.op in sends
            if not is_send and o.op not in (self._orig["irecv"], c.irecv, self._wrapped.get("irecv")):
                raise ValueError(f"batch_isend_irecv: op {i} is neither isend nor irecv")
            pg = self._pg(o.group)
            g = self._group(pg)
            n, d = _desc(o.tensor)
            purpose, layer, step = self._labels("isend" if is_send else "irecv")
            call = _Call(self, g, "send" if is_send else "recv", "none", n, d,
                         self._nbytes(g, n, d) if is_send else 0, purpose, layer, step,
                         out=None if is_send else o.tensor, sent=o.tensor if is_send else None, peer=o.peer,
                         tag=o.tag, recv_src_pg=pg)
            call.reserve()
            if is_send:
                call.in_digest = buffer_digest(o.tensor, self.alg)
            calls.append(call)
            # a P2POp bound to torch's own function (P2POp's constructor checks the op against the
            # module's isend/irecv, the wrappers while instrumented: built without it)
            r = object.__new__(c.P2POp)
            r.op = self._orig["isend"] if is_send else self._orig["irecv"]
            r.tensor, r.peer, r.group, r.tag = o.tensor, o.peer, o.group, o.tag
            raw.append(r)
        try:
            works = self._orig[fname](raw)
        except BaseException:
            for call in reversed(calls):
                self._forget(call)
            raise
        if len(works) == len(calls):
            return [_Work(wk, call) for wk, call in zip(works, calls)]
        # a coalesced batch (NCCL) hands back one work for all: it settles every call
        return [_BatchWork(wk, calls) for wk in works]

    # ---- DDP ----------------------------------------------------------------------
    def _ddp_hook(self):
        inst = self

        def hook(state, bucket):
            buf = bucket.buffer()
            pg = state if state is not None else None
            n = inst.dist.get_world_size(pg) if pg is not None else inst.dist.get_world_size()
            buf.div_(n)
            with inst.context(purpose=inst.ddp_purpose):
                work = inst.dist.all_reduce(buf, group=pg, async_op=True)
            return work.get_future().then(lambda f: f.value()[0])

        return hook

    def _patch_ddp(self):
        try:
            from torch.nn.parallel import DistributedDataParallel as DDP
        except ImportError:  # pragma: no cover
            return
        inst = self
        orig_forward, orig_reg, orig_builtin = DDP.forward, DDP.register_comm_hook, DDP._register_builtin_comm_hook

        def forward(model, *a, **kw):
            if _ACTIVE is inst and not getattr(model, "_le_hooked", False):
                model._le_hooked = True
                orig_reg(model, model.process_group, inst._ddp_hook())
            return orig_forward(model, *a, **kw)

        def register_comm_hook(model, state, hook):
            # the trainer's own Python hook: its torch.distributed calls are intercepted like any other
            model._le_hooked = True
            return orig_reg(model, state, hook)

        def register_builtin(model, comm_hook_type):
            raise ValueError("instrument: DDP's built-in C++ communication hook reduces below Python, where the "
                             "trace cannot see it; register a Python hook (register_comm_hook) or none")

        DDP.forward, DDP.register_comm_hook, DDP._register_builtin_comm_hook = forward, register_comm_hook, \
            register_builtin
        self._ddp = (DDP, orig_forward, orig_reg, orig_builtin)

    # ---- install / remove ------------------------------------------------------------
    def install(self):
        global _ACTIVE
        with _ACTIVE_LOCK:
            if _ACTIVE is not None:
                raise ValueError("instrument: torch.distributed is already instrumented (remove() it first)")
            self._wrapped = {}
            for fname in _FUNCS:
                f = getattr(self.c10d, fname, None)
                if f is None:
                    continue
                self._orig[fname] = f
                self._wrapped[fname] = self._wrap(fname)
            for fname, wr in self._wrapped.items():
                setattr(self.c10d, fname, wr)
                if getattr(self.dist, fname, None) is self._orig[fname]:
                    setattr(self.dist, fname, wr)
            self._patch_ddp()
            _ACTIVE = self
        self.w._close_hooks.append(self._on_close)
        self.w._poll_hooks.append(self.poll)
        return self

    def remove(self):
        """Settle nothing, restore torch.distributed (idempotent)."""
        global _ACTIVE
        with _ACTIVE_LOCK:
            if _ACTIVE is not self:
                return
            for fname, wr in self._wrapped.items():
                if getattr(self.c10d, fname, None) is wr:
                    setattr(self.c10d, fname, self._orig[fname])
                if getattr(self.dist, fname, None) is wr:
                    setattr(self.dist, fname, self._orig[fname])
            if self._ddp is not None:
                DDP, fw, reg, builtin = self._ddp
                DDP.forward, DDP.register_comm_hook, DDP._register_builtin_comm_hook = fw, reg, builtin
            _ACTIVE = None
        for hooks, h in ((self.w._close_hooks, self._on_close), (self.w._poll_hooks, self.poll)):
            if h in hooks:
                hooks.remove(h)

    def settle_all(self):
        """Wait for every issued, unsettled call and write its event (close()
        does this first: an async call nobody waited on still completed)."""
        with self.plock:
            calls = list(self.pending.values())
        for call in sorted(calls, key=lambda x: (str(x.key), x.k)):
            proxy = getattr(call, "proxy", None)
            if proxy is not None:
                proxy.wait()
            else:
                call.done()

    def poll(self):
        """Settle every async call whose work completed (the writer calls this at
        each phase boundary, so a call nobody waits on lands in its phase)."""
        with self.plock:
            calls = [c for c in self.pending.values() if c.proxy is not None]
        for call in sorted(calls, key=lambda x: (str(x.key), x.k)):
            call.proxy.is_completed()

    def _on_close(self, status):
        if status == "complete":
            self.settle_all()
        self.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


class _BatchWork(_Work):
    """One work for a coalesced batch: its completion settles every call."""

    def __init__(self, work, calls):
        super().__init__(work, calls[0])
        self._calls = calls
        for c in calls:
            c.proxy = self

    def _settle(self):
        for c in self._calls:
            c.done()


def instrument(writer, groups=None, digest=None, ddp_purpose="grad_allreduce"):
    """Intercept torch.distributed for WRITER (module docstring). groups:
    {header group name: process group, None for the default group}; a
    process group left out is matched to the one header group with its
    ranks. digest: "xxh3_128" or "sha256" for buffer digests (default the
    writer's). Returns the Instrumentation (a context manager; the writer's
    close() settles what is pending and removes it)."""
    return Instrumentation(writer, groups, digest, ddp_purpose).install()
