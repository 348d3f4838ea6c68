"""Layer hooks: a torch module's forward and backward become layer_end events.

LayerHooks registers a forward pre-hook (start time), a forward hook
(layer_end dir fwd, out_norm = 2-norm of the output) and a full backward hook
(layer_end dir bwd, out_norm = 2-norm of the gradient of the output).

Recompute detection: a forward re-run under activation checkpointing is tagged
recompute: true when it runs inside `recomputing()` (a thread-local flag) with
grad enabled. `checkpoint(fn, *args)` wraps torch.utils.checkpoint.checkpoint
so that every call of fn after the first (the recompute, whether reentrant or
not) runs inside recomputing(); a trainer with its own recompute wraps it in
`with recomputing():`. A bare torch.utils.checkpoint call is not detected.
"""

import contextlib
import threading
import time

_state = threading.local()


def is_recomputing():
    return getattr(_state, "depth", 0) > 0


@contextlib.contextmanager
def recomputing():
    """Mark the forwards run inside as a checkpoint recompute (this thread)."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def checkpoint(fn, *args, **kwargs):
    """torch.utils.checkpoint.checkpoint(fn, *args, **kwargs), with the
    recompute of fn run inside recomputing()."""
    import torch.utils.checkpoint

    calls = [0]

    def run(*a, **k):
        calls[0] += 1
        if calls[0] == 1:
            return fn(*a, **k)
        with recomputing():
            return fn(*a, **k)

    return torch.utils.checkpoint.checkpoint(run, *args, **kwargs)


def _first_tensor(x):
    import torch

    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (list, tuple)):
        for y in x:
            t = _first_tensor(y)
            if t is not None:
                return t
    if isinstance(x, dict):
        for y in x.values():
            t = _first_tensor(y)
            if t is not None:
                return t
    return None


def _norm(t):
    if t is None:
        return 0.0
    import torch

    with torch.no_grad():
        return float(t.detach().double().norm().item())


def default_tokens(t):
    """Tokens of an output [..., T, D]: its element count over the last dim."""
    if t is None or t.dim() == 0:
        return 0
    return t.numel() // max(t.shape[-1], 1) if t.dim() >= 2 else t.shape[0]


def _memory(t):
    import torch

    if t is not None and t.is_cuda:
        return torch.cuda.memory_allocated(t.device), torch.cuda.max_memory_allocated(t.device)
    return 0, 0


class LayerHooks:
    """Hooks on one module. context() returns (phase, step, member) or
    (phase, step, member, tokens) at the time the hook fires, or None to
    write nothing (a forward the trace should not count); tokens defaults
    to tokens(output) (default_tokens: the output's element count over its last
    dimension). The output (gradient) used is the first tensor of the module's
    output, searched depth-first in tuples, lists and dicts."""

    def __init__(self, writer, module, layer, kind, context, tokens=None, fwd=True, bwd=True):
        self.writer = writer
        self.layer = layer
        self.kind = kind
        self.context = context
        self.tokens = tokens or default_tokens
        self._t0 = threading.local()
        self._handles = []
        if kind not in writer.layer_kinds:
            raise ValueError(f"LayerHooks.kind: {kind!r} is not one of the header's layer_kinds {writer.layer_kinds}")
        if fwd:
            self._handles.append(module.register_forward_pre_hook(self._pre))
            self._handles.append(module.register_forward_hook(self._fwd))
        if bwd:
            if hasattr(module, "register_full_backward_pre_hook"):  # torch >= 2.0: bwd wall_ns
                self._handles.append(module.register_full_backward_pre_hook(self._bpre))
            self._handles.append(module.register_full_backward_hook(self._bwd))

    def _ctx(self, out):
        c = self.context()
        if c is None:
            return None
        c = tuple(c)
        if len(c) == 4:
            return c
        if len(c) != 3:
            raise ValueError("LayerHooks.context: must return (phase, step, member[, tokens])")
        return c + (self.tokens(out),)

    def _pre(self, module, inputs):
        self._t0.t = time.monotonic_ns()

    def _bpre(self, module, grad_output):
        self._t0.b = time.monotonic_ns()

    def _fwd(self, module, inputs, output):
        import torch

        t = _first_tensor(output)
        wall = time.monotonic_ns() - getattr(self._t0, "t", time.monotonic_ns())
        c = self._ctx(t)
        if c is None:
            return
        phase, step, member, tokens = c
        live, peak = _memory(t)
        self.writer.layer_end(phase, step, member, self.layer, self.kind, "fwd", tokens, _norm(t),
                              wall_ns=max(wall, 0), live_bytes=live, peak_bytes=peak,
                              recompute=is_recomputing() and torch.is_grad_enabled())

    def _bwd(self, module, grad_input, grad_output):
        g = _first_tensor(grad_output)
        c = self._ctx(g)
        if c is None:
            self._t0.b = None
            return
        phase, step, member, tokens = c
        live, peak = _memory(g)
        t0 = getattr(self._t0, "b", None)
        self._t0.b = None
        wall = time.monotonic_ns() - t0 if t0 is not None else 0
        self.writer.layer_end(phase, step, member, self.layer, self.kind, "bwd", tokens, _norm(g),
                              wall_ns=max(wall, 0), live_bytes=live, peak_bytes=peak)

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []
