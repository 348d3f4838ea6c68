"""RunWriter: one rank's part of a v2 run directory (docs/contract.md).

    RUN/rank-NNNN/events.jsonl.zst   the trace (trace.py), streamed
    RUN/rank-NNNN/receipt.json       written atomically by close()
RUN/manifest.json is written by manifest.write_manifest on rank 0 once every
rank closed.
"""

import contextlib
import os
import re
import resource
import time
from collections import namedtuple

from . import check
from .build import build_digest, check_artifacts, default_artifacts
from .config import check_config, check_path
from .digests import DTYPES, check_digest_alg, tensor_sha256, trainable_digest
from .fsutil import sha256_file
from .receipt import write_receipt
from .trace import TRACE_SCHEMA, TraceWriter, host_name

Group = namedtuple("Group", "name kind members")
GROUP_KINDS = ("world", "dp", "cp", "tp", "pp", "ep")
OPS = ("allreduce", "broadcast", "allgather", "reduce_scatter", "all_to_all", "sendrecv", "send",
       "recv", "reduce", "barrier")
REDS = ("sum", "max", "min", "prod", "avg", "none")
DIRS = ("fwd", "bwd")
# Ops whose output every member of the group must hold identically.
SAME_OUTPUT_OPS = ("allreduce", "broadcast", "allgather")
# Point-to-point messages: gseq counts one channel (group, sender, receiver, tag).
P2P_OPS = ("send", "recv")
DIGEST = re.compile(r"^(sha256:[0-9a-f]{64}|xxh3_128:[0-9a-f]{32})$")
STATUS_NAMES = {1: "bad argument", 2: "out of memory", 3: "I/O error", 4: "malformed input",
                5: "truncated input", 6: "corrupt data", 7: "schema violation",
                8: "non-finite value", 9: "signature verification failed", 10: "unsupported",
                11: "collective failed", 12: "internal error"}
OPTIMIZER_FIELDS = ("n_params", "lr", "grad_norm")
MAX_MEM_CATEGORIES = 64  # the reader's limits (receipts/format/trace_event.h)
MAX_METRICS = 62         # 64 members of a step_metrics event, step and objective included


def _profile_paths(profile_path):
    """The decisions a profile names (its "paths"), or None when it names none (or is not JSON: the
    writer digests a profile, it does not validate one)."""
    import json

    try:
        with open(profile_path, "rb") as f:
            doc = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    p = doc.get("paths") if isinstance(doc, dict) else None
    if not isinstance(p, list) or not all(isinstance(k, str) for k in p):
        return None
    return list(p)


def rank_dir(rank):
    return f"rank-{rank:04d}"


def _vocab(where, names):
    names = list(names)
    if not 1 <= len(names) <= 32:
        raise ValueError(f"{where}: {len(names)} names, 1-32 required")
    for i, n in enumerate(names):
        check.ident(f"{where}[{i}]", n, check.VOCAB)
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: names repeat")
    return names


def _groups(groups, rank, world):
    out = []
    names = set()
    for i, g in enumerate(groups):
        g = Group(*g)
        check.token(f"groups[{i}].name", g.name)
        check.one_of(f"groups[{i}].kind", g.kind, GROUP_KINDS)
        if g.name in names:
            raise ValueError(f"groups[{i}].name: {g.name!r} repeats")
        names.add(g.name)
        members = [check.uint(f"groups[{i}].members[{j}]", m) for j, m in enumerate(g.members)]
        if not members or len(set(members)) != len(members) or max(members) >= world:
            raise ValueError(f"groups[{i}].members: {members} must be distinct ranks below world {world}")
        if rank not in members:
            raise ValueError(f"groups[{i}].members: {members} does not hold this rank {rank} "
                             "(a trace names the groups its rank communicates in)")
        out.append(Group(g.name, g.kind, members))
    return out


class RunWriter:
    """One rank's writer. Every method checks its arguments and raises
    ValueError/TypeError naming the field; nothing invalid reaches the trace."""

    def __init__(self, out_dir, rank, world, run_id, profile_name, profile_path, tool="longstraw-emit/python",
                 groups=(), phases=(), layer_kinds=(), config=None, artifacts=None, compress=True,
                 flush_bytes=None, digest=None):
        self.digest_alg = check_digest_alg("digest", digest)
        self.world = check.uint("world", world, 1)
        self.rank = check.uint("rank", rank)
        if self.rank >= self.world:
            raise ValueError(f"rank: {rank} is not below world {world}")
        self.run_id = check.token("run_id", run_id)
        self.profile_name = check.ident("profile_name", profile_name, check.PROFILE)
        try:
            self.profile_sha256 = sha256_file(profile_path)
        except OSError as e:
            raise ValueError(f"profile_path: {profile_path}: {e.strerror}") from None
        self.profile_paths = _profile_paths(profile_path)
        if not isinstance(tool, str) or not tool:
            raise ValueError("tool: empty")
        self.groups = _groups(groups, self.rank, self.world)
        self.phases = _vocab("phases", phases)
        self.layer_kinds = _vocab("layer_kinds", layer_kinds)
        self.config = check_config(config)
        self._paths = {k: set(v) for k, v in self.config.pop("paths", {}).items()}
        for k in self._paths:
            self._path_key(k)
        if artifacts is None:
            artifacts = default_artifacts(out_dir)
        check_artifacts(artifacts)
        self.artifacts = list(artifacts)
        self.build_digest = build_digest(self.artifacts)
        self.out_dir = out_dir
        self.host = host_name()
        self.events_rel = f"{rank_dir(self.rank)}/events.jsonl" + (".zst" if compress else "")
        os.makedirs(os.path.join(out_dir, rank_dir(self.rank)), exist_ok=True)
        self.start_unix_ns = time.time_ns()
        header = {"v": 2, "kind": "longstraw.trace.header", "schema": TRACE_SCHEMA, "run_id": self.run_id,
                  "rank": self.rank, "world": self.world, "host": self.host, "pid": os.getpid(),
                  "start_unix_ns": self.start_unix_ns,
                  "groups": [{"name": g.name, "kind": g.kind, "members": g.members} for g in self.groups],
                  "tool": tool, "profile": self.profile_name, "phases": self.phases,
                  "layer_kinds": self.layer_kinds}
        kw = {} if flush_bytes is None else {"flush_bytes": flush_bytes}
        self.trace = TraceWriter(os.path.join(out_dir, self.events_rel), header, self.rank, compress, **kw)
        self._gseq = {g.name: 0 for g in self.groups}
        self._p2p_seq = {}  # (group, sender, receiver, tag) -> next gseq
        self._ready, self._next_write = {}, {}  # per sequence key: settled events waiting, the next to write
        self._close_hooks = []  # called first by close(): the instrumentation settles its pending calls
        self._poll_hooks = []   # called at every phase boundary: it settles the calls that completed
        self._group = {g.name: g for g in self.groups}
        self._phase_stats = {}  # phase -> [count, wall_ns_total], in order of first end
        self._open_phases = []
        self._error = None
        self.closed = False

    # ---- vocabulary ---------------------------------------------------------
    def _phase(self, where, phase):
        if phase not in self.phases:
            raise ValueError(f"{where}: {phase!r} is not one of the header's phases {self.phases}")
        return phase

    def group(self, name):
        g = self._group.get(name)
        if g is None:
            raise ValueError(f"group: {name!r} is not one of the header's groups {list(self._group)}")
        return g

    # ---- the run's path ------------------------------------------------------
    def _path_key(self, key):
        if self.profile_paths is not None and key not in self.profile_paths:
            raise ValueError(f"path: {key!r} is not one of the decisions the profile {self.profile_name} names "
                             f"{self.profile_paths}")
        return key

    def path(self, key, *values):
        """Record that the run took VALUES of the decision KEY (config "paths", docs/contract.md
        section 2): accumulated as a set, written as a sorted array in the configuration at close."""
        if self.closed:
            raise ValueError("path: the writer is closed")
        if not values:
            raise ValueError(f"path: {key!r} with no value")
        for v in values:
            check_path(key, v)
        self._path_key(key)
        self._paths.setdefault(key, set()).update(values)

    @property
    def paths(self):
        """The path recorded so far: {key: sorted values}."""
        return {k: sorted(v) for k, v in sorted(self._paths.items())}

    # ---- phases -------------------------------------------------------------
    def _poll(self):
        for hook in list(self._poll_hooks):
            hook()

    def phase_begin(self, phase, step):
        self._phase("phase_begin.phase", phase)
        step = check.uint("phase_begin.step", step)
        self._poll()
        self.trace.emit("phase_begin", [("phase", phase), ("step", step)])
        self._open_phases.append((phase, step, time.monotonic_ns()))

    def phase_end(self, phase, step, ok=True, wall_ns=None):
        self._phase("phase_end.phase", phase)
        step = check.uint("phase_end.step", step)
        if not self._open_phases or self._open_phases[-1][:2] != (phase, step):
            raise ValueError(f"phase_end: ({phase}, {step}) is not the open phase "
                             f"{self._open_phases[-1][:2] if self._open_phases else 'none'}")
        self._poll()
        t0 = self._open_phases.pop()[2]
        wall = time.monotonic_ns() - t0 if wall_ns is None else check.uint("phase_end.wall_ns", wall_ns)
        self.trace.emit("phase_end", [("phase", phase), ("step", step), ("wall_ns", wall), ("ok", bool(ok))])
        s = self._phase_stats.setdefault(phase, [0, 0])
        s[0] += 1
        s[1] += wall

    @contextlib.contextmanager
    def phase(self, phase, step):
        """phase_begin, the body, phase_end (ok=False if an exception escapes)."""
        self.phase_begin(phase, step)
        ok = False
        try:
            yield
            ok = True
        finally:
            self.phase_end(phase, step, ok=ok)

    # ---- events ---------------------------------------------------------------
    def layer_end(self, phase, step, member, layer, kind, dir, tokens, out_norm, wall_ns=0, live_bytes=0,
                  peak_bytes=0, recompute=False):
        f = [("phase", self._phase("layer_end.phase", phase)), ("step", check.uint("layer_end.step", step)),
             ("member", check.uint("layer_end.member", member, -1)),
             ("layer", check.uint("layer_end.layer", layer, -1))]
        if kind not in self.layer_kinds:
            raise ValueError(f"layer_end.kind: {kind!r} is not one of the header's layer_kinds {self.layer_kinds}")
        f += [("kind", kind), ("dir", check.one_of("layer_end.dir", dir, DIRS)),
              ("tokens", check.uint("layer_end.tokens", tokens)),
              ("live_bytes", check.uint("layer_end.live_bytes", live_bytes)),
              ("peak_bytes", check.uint("layer_end.peak_bytes", peak_bytes)),
              ("wall_ns", check.uint("layer_end.wall_ns", wall_ns)),
              ("out_norm", check.number("layer_end.out_norm", out_norm, nonneg=True))]
        if recompute:
            f.append(("recompute", True))
        return self.trace.emit("layer_end", f)

    def next_gseq(self, group):
        """Reserve the group's next per-group sequence number."""
        self.group(group)
        with self.trace._lock:
            g = self._gseq[group]
            self._gseq[group] = g + 1
            return g

    def next_p2p_seq(self, group, peer, send, tag=0):
        """Reserve the next sequence number of a point-to-point channel: this
        rank's next send to PEER (send=True) or receive from PEER in GROUP with
        TAG. The sender's k-th message and the receiver's k-th receive of one
        channel both carry k."""
        g = self.group(group)
        peer = check.uint("collective.peer", peer)
        tag = check.uint("collective.tag", tag)
        if peer not in g.members or peer == self.rank:
            raise ValueError(f"collective.peer: {peer} is not another member of group {group!r} {g.members}")
        key = (group, self.rank, peer, tag) if send else (group, peer, self.rank, tag)
        with self.trace._lock:
            k = self._p2p_seq.get(key, 0)
            self._p2p_seq[key] = k + 1
            return k

    def collective(self, group, op, red, count, dtype, bytes, purpose, layer=None, step=None, out_sha256=None,
                   gseq=None, out_digest=None, in_digest=None, in_digest_done=None, peer=None, tag=None,
                   declared=False):
        """One collective event. gseq defaults to the group's next (for send and
        recv: the channel's next, next_p2p_seq), and the event is then written
        in sequence order after any earlier reserved call of its group or
        channel still pending (le.instrument's async calls); a gseq given is
        written as it is. The wrappers (collectives.py, instrument.py) call
        this once the operation completed. out_digest, in_digest,
        in_digest_done: "ALG:HEX" (digests.buffer_digest); peer: the other
        side's global rank (send, recv: required); declared: the call was not
        observed, the trainer declares it (note())."""
        fields, key = self._collective_fields(group, op, red, count, dtype, bytes, purpose, layer, step, out_sha256,
                                              out_digest, in_digest, in_digest_done, peer, tag, declared)
        with self.trace._lock:
            if gseq is not None:
                return self.trace.emit("collective", [("group", group),
                                                      ("gseq", check.uint("collective.gseq", gseq))] + fields)
            k = self.next_p2p_seq(group, peer, op == "send", tag or 0) if op in P2P_OPS else self.next_gseq(group)
            return self._settle(key, k, fields)

    def _collective_key(self, group, op, peer, tag):
        """The sequence a collective counts in: its group, or for send and recv its channel."""
        if op not in P2P_OPS:
            return ("g", group)
        send = op == "send"
        return ("p", group, self.rank if send else peer, peer if send else self.rank, tag or 0)

    def _collective_fields(self, group, op, red, count, dtype, bytes, purpose, layer=None, step=None,
                           out_sha256=None, out_digest=None, in_digest=None, in_digest_done=None, peer=None,
                           tag=None, declared=False):
        """The event's fields after group and gseq, checked, and its sequence key."""
        g = self.group(group)
        check.one_of("collective.op", op, OPS)
        check.one_of("collective.red", red, REDS)
        check.one_of("collective.dtype", dtype, DTYPES)
        check.ident("collective.purpose", purpose)
        f_tail = [("op", op), ("red", red), ("count", check.uint("collective.count", count)), ("dtype", dtype),
                  ("bytes", check.uint("collective.bytes", bytes)), ("purpose", purpose)]
        if layer is not None:
            f_tail.append(("layer", check.uint("collective.layer", layer, -1)))
        if step is not None:
            f_tail.append(("step", check.uint("collective.step", step)))
        if out_sha256 is not None:
            if not isinstance(out_sha256, str) or not check.HEX64.match(out_sha256):
                raise ValueError(f"collective.out_sha256: {out_sha256!r} is not 64 lowercase hex digits")
            f_tail.append(("out_sha256", out_sha256))
        for name, v in (("out_digest", out_digest), ("in_digest", in_digest), ("in_digest_done", in_digest_done)):
            if v is None:
                continue
            if not isinstance(v, str) or not DIGEST.match(v):
                raise ValueError(f"collective.{name}: {v!r} is not sha256:<64 hex> or xxh3_128:<32 hex>")
            f_tail.append((name, v))
        if op in P2P_OPS:
            if peer is None:
                raise ValueError(f"collective.peer: a {op} needs its peer (the other side's global rank)")
            peer = check.uint("collective.peer", peer)
            if peer not in g.members or peer == self.rank:
                raise ValueError(f"collective.peer: {peer} is not another member of group {group!r} {g.members}")
            f_tail.append(("peer", peer))
            tag = check.uint("collective.tag", 0 if tag is None else tag)
            if tag:
                f_tail.append(("tag", tag))
        elif peer is not None or tag is not None:
            raise ValueError(f"collective.peer: only a send or recv has a peer, not {op}")
        if declared:
            f_tail.append(("declared", True))
        return f_tail, self._collective_key(group, op, peer, tag)

    def _unreserve(self, key, k):
        """Give back sequence number k of KEY, reserved by a call that raised
        before it communicated: the last one reserved is reused; an earlier one
        (another thread reserved since) is skipped when the events are written."""
        with self.trace._lock:
            counters, ck = (self._p2p_seq, key[1:]) if key[0] == "p" else (self._gseq, key[1])
            if counters.get(ck) == k + 1:
                counters[ck] = k
            else:
                self._settle(key, k, None)

    def _settle(self, key, k, fields):
        """Write the event of sequence number k of KEY (reserved earlier) and
        every later one already settled, in order; returns k's seq once written
        (None while an earlier call of its key is pending)."""
        with self.trace._lock:
            self._ready.setdefault(key, {})[k] = fields
            n = self._next_write.get(key, 0)
            ready = self._ready[key]
            seq = None
            while n in ready:
                f = ready.pop(n)
                if f is not None:  # None: a call that failed before it communicated (_unreserve)
                    s = self.trace.emit("collective", [("group", key[1]), ("gseq", n)] + f)
                    if n == k:
                        seq = s
                n += 1
            self._next_write[key] = n
            return seq

    def memory(self, step, phase, categories, rss_peak=None, total_live=None, total_peak=None):
        """categories: {name: (live, peak)}. total_live defaults to the sum of
        the lives, total_peak to the sum of the peaks (an upper bound of the
        total's high-water mark: pass the measured one when you have it),
        rss_peak to getrusage's ru_maxrss."""
        step = check.uint("memory.step", step)
        self._phase("memory.phase", phase)
        cats = {}
        categories = dict(categories)
        if len(categories) > MAX_MEM_CATEGORIES:
            raise ValueError(f"memory.categories: {len(categories)} categories, at most {MAX_MEM_CATEGORIES}")
        for name, v in categories.items():
            check.token("memory.categories key", name)
            if len(name) > 64:
                raise ValueError(f"memory.categories key: {name[:20]!r}... is longer than 64 bytes")
            live, peak = (v["live"], v["peak"]) if isinstance(v, dict) else tuple(v)
            cats[name] = {"live": check.uint(f"memory.categories.{name}.live", live),
                          "peak": check.uint(f"memory.categories.{name}.peak", peak)}
        tl = sum(c["live"] for c in cats.values()) if total_live is None else total_live
        tp = sum(c["peak"] for c in cats.values()) if total_peak is None else total_peak
        if rss_peak is None:
            rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return self.trace.emit("memory", [("step", step), ("phase", phase), ("categories", cats),
                                          ("total_live", check.uint("memory.total_live", tl)),
                                          ("total_peak", check.uint("memory.total_peak", tp)),
                                          ("rss_peak", check.uint("memory.rss_peak", rss_peak))])

    def optimizer_step(self, step, **fields):
        """The v1 event: step, n_params, lr, grad_norm (all required)."""
        extra = set(fields) - set(OPTIMIZER_FIELDS)
        if extra:
            raise ValueError(f"optimizer_step: unknown field(s) {sorted(extra)}; fields are {OPTIMIZER_FIELDS}")
        missing = [k for k in OPTIMIZER_FIELDS if k not in fields]
        if missing:
            raise ValueError(f"optimizer_step: missing field(s) {missing}")
        return self.trace.emit("optimizer_step", [
            ("step", check.uint("optimizer_step.step", step)),
            ("n_params", check.uint("optimizer_step.n_params", fields["n_params"])),
            ("lr", check.number("optimizer_step.lr", fields["lr"], nonneg=True)),
            ("grad_norm", check.number("optimizer_step.grad_norm", fields["grad_norm"], nonneg=True))])

    def step_metrics(self, step, objective, **metrics):
        """step, objective, then any numeric metric (None -> null; NaN and
        inf are refused)."""
        f = [("step", check.uint("step_metrics.step", step)),
             ("objective", check.one_of("step_metrics.objective", objective, ("grpo", "sft")))]
        if len(metrics) > MAX_METRICS:
            raise ValueError(f"step_metrics: {len(metrics)} metrics, at most {MAX_METRICS}")
        for k, v in metrics.items():
            if k == "prefix_frozen" or not (check.METRIC.match(k) or check.VOCAB.match(k)):
                raise ValueError(f"step_metrics key: {k!r} does not match ^[a-z][a-z0-9_]{{0,63}}$ "
                                 "or ^[a-z][a-z0-9_.-]{0,31}$")
            f.append((k, check.number_or_null(f"step_metrics.{k}", v)))
        return self.trace.emit("step_metrics", f)

    def param_digest(self, step, target, sha256):
        check.token("param_digest.target", target)
        if not isinstance(sha256, str) or not check.HEX64.match(sha256):
            raise ValueError(f"param_digest.sha256: {sha256!r} is not 64 lowercase hex digits")
        return self.trace.emit("param_digest", [("step", check.uint("param_digest.step", step)),
                                                ("target", target), ("sha256", sha256)])

    def param_digests(self, step, named_tensors):
        """One param_digest per (name, tensor), then target "trainable" over
        the lines "NAME HEX\\n" in the order given. Returns the trainable hex."""
        items = list(named_tensors.items() if isinstance(named_tensors, dict) else named_tensors)
        names = set()
        lines = []
        for name, t in items:
            check.token("param_digests name", name)
            if name == "trainable" or name in names:
                raise ValueError(f"param_digests: name {name!r} is reserved or repeats")
            names.add(name)
            lines.append((name, tensor_sha256(t)))
        for name, hexd in lines:
            self.param_digest(step, name, hexd)
        total = trainable_digest(lines)
        self.param_digest(step, "trainable", total)
        return total

    def gradient_probe(self, step, objective, grad_mode, grouping, h, seed, evaluations, seconds, tol, verdict,
                       ranks_agree, groups, reason=None):
        """The gradient_probe event (le.gradient_probe computes and writes it): the fields of
        schemas/event-gradient_probe.schema.json in the v2 envelope, in its order. Every number
        finite."""
        from .probe import GROUP_VERDICTS, VERDICTS

        f = [("step", check.uint("gradient_probe.step", step)),
             ("objective", check.one_of("gradient_probe.objective", objective, ("grpo", "sft"))),
             ("grad_mode", check.one_of("gradient_probe.grad_mode", grad_mode, ("detached", "full"))),
             ("grouping", check.one_of("gradient_probe.grouping", grouping, ("all", "layer"))),
             ("h", check.number("gradient_probe.h", h, nonneg=True)),
             ("seed", check.uint("gradient_probe.seed", seed)),
             ("evaluations", check.uint("gradient_probe.evaluations", evaluations)),
             ("seconds", check.number("gradient_probe.seconds", seconds, nonneg=True)),
             ("tol", check.number("gradient_probe.tol", tol, nonneg=True)),
             ("verdict", check.one_of("gradient_probe.verdict", verdict, VERDICTS))]
        if reason is not None:
            if not isinstance(reason, str) or not reason:
                raise ValueError("gradient_probe.reason: not a non-empty string")
            f.append(("reason", reason))
        if not isinstance(ranks_agree, bool):
            raise TypeError("gradient_probe.ranks_agree: not a boolean")
        f.append(("ranks_agree", ranks_agree))
        groups = list(groups)
        if len(groups) > 4096:
            raise ValueError(f"gradient_probe.groups: {len(groups)} groups, at most 4096")
        gs = []
        for i, g in enumerate(groups):
            w = f"gradient_probe.groups[{i}]"
            if not isinstance(g.get("decided_alike"), bool):
                raise TypeError(f"{w}.decided_alike: not a boolean")
            gh = check.number(f"{w}.h", g["h"], nonneg=True)
            if not gh > 0:
                raise ValueError(f"{w}.h: must be positive")
            gs.append({"name": check.token(f"{w}.name", g["name"]),
                       "tensors": check.uint(f"{w}.tensors", g["tensors"]),
                       "derivative": check.number(f"{w}.derivative", g["derivative"]),
                       "applied": check.number(f"{w}.applied", g["applied"]),
                       "error_estimate": check.number(f"{w}.error_estimate", g["error_estimate"], nonneg=True),
                       "rounding_floor": check.number(f"{w}.rounding_floor", g["rounding_floor"], nonneg=True),
                       "rel_error": check.number(f"{w}.rel_error", g["rel_error"], nonneg=True),
                       "tolerance": check.number(f"{w}.tolerance", g["tolerance"], nonneg=True),
                       "h": gh, "decided_alike": g["decided_alike"],
                       "verdict": check.one_of(f"{w}.verdict", g["verdict"], GROUP_VERDICTS)})
        f.append(("groups", gs))
        return self.trace.emit("gradient_probe", f)

    def error(self, message, code=12):
        """An error event (flushed): code (an ls_status of common/status.h,
        default 12 internal error), its status name and the message. The
        event has exactly these fields (the reader refuses others): put
        context into the message."""
        code = check.uint("error.code", code, 1)
        if code > 255:
            raise ValueError(f"error.code: {code} is above 255")
        message = str(message) or "error"
        self._error = (code, message)
        return self.trace.emit("error", [("code", code), ("status", STATUS_NAMES.get(code, "error")),
                                         ("message", message)])

    # ---- end ---------------------------------------------------------------------
    def close(self, status="complete", steps=1, steps_exact=None, grad_digest_disagreements=None):
        """complete: rank_complete, then the receipt. error: the trace ends at
        the last event (an error event is written first if none was), the
        receipt says status error with the error's code and message.
        grad_digest_disagreements: the steps whose finalized gradient this rank
        found differing from the other ranks' (receipt rank_state; the audit's
        digests.receipts reads it, and is not applicable without it)."""
        if self.closed:
            return
        check.one_of("close.status", status, ("complete", "error"))
        for hook in list(self._close_hooks):
            hook(status)
        steps = check.uint("close.steps", steps)
        steps_exact = steps if steps_exact is None else check.uint("close.steps_exact", steps_exact)
        if grad_digest_disagreements is not None:
            grad_digest_disagreements = check.uint("close.grad_digest_disagreements", grad_digest_disagreements)
        if steps_exact > steps:
            raise ValueError(f"close.steps_exact: {steps_exact} exceeds steps {steps}")
        if status == "complete":
            if self._open_phases:
                raise ValueError(f"close: phase {self._open_phases[-1][:2]} is still open")
            missing = [k for k in (self.profile_paths or ()) if k not in self._paths]
            if missing:
                raise ValueError(f"close: the run recorded no value of {missing}, decisions the profile "
                                 f"{self.profile_name} names (w.path(key, value))")
            self.trace.emit("rank_complete", [("steps", steps), ("events", self.trace.events)])
        elif self._error is None:
            self.error("the run failed")
        self.trace.close()
        self.closed = True
        count = self.trace.events
        pred = {"run_id": self.run_id, "rank": self.rank, "world": self.world, "host": self.host,
                "profile": {"name": self.profile_name, "sha256": self.profile_sha256},
                "build": {"artifacts": self.artifacts, "build_digest": self.build_digest},
                "config": self.run_config(), "steps": steps, "steps_exact": steps_exact,
                "events": {"file": self.events_rel, "count": count, "last_seq": count - 1 if count else None},
                "status": status,
                "phases": [{"phase": p, "count": c, "wall_ns_total": w} for p, (c, w) in self._phase_stats.items()]}
        if grad_digest_disagreements is not None:
            pred["rank_state"] = {"grad_digest_disagreements": grad_digest_disagreements}
        if status == "error":
            pred["error"] = {"code": self._error[0], "message": self._error[1]}
        return write_receipt(self.out_dir, pred)

    def run_config(self):
        """The configuration as the receipt records it: the one given at open, with "paths" (the path
        recorded) when any was."""
        cfg = dict(self.config)
        if self._paths:
            cfg["paths"] = self.paths
        return cfg

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if self.closed:
            return False
        if et is None:
            self.close()
        else:
            if self._error is None:
                self.error(f"{et.__name__}: {ev}")
            self.close(status="error")
        return False
