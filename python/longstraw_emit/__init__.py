"""longstraw_emit: write LongStraw v2 run directories from any Python trainer.

docs/contract.md is the format; docs/emitter.md the API and what the emitter
cannot see. The trace, receipt, manifest and build identity need only the
standard library and zstandard; torch is imported only by the hooks, the
collective wrappers and tensor digests.
"""

from .build import build_digest, code_artifact, collect_artifacts, tree_digest
from .config import PATHS
from .digests import buffer_digest, default_digest_alg, tensor_bytes, tensor_sha256, trace_dtype
from .jcs import JcsError, jcs, jcs_sha256
from .manifest import ManifestError, write_manifest
from .run import Group, RunWriter


def __getattr__(name):
    # torch-using parts, imported on first use
    if name in ("LayerHooks", "recomputing", "checkpoint", "is_recomputing"):
        from . import hooks

        return getattr(hooks, name)
    if name in ("gradient_probe", "layer_groups"):
        from . import probe

        return getattr(probe, name)
    if name == "Collectives":
        from .collectives import Collectives

        return Collectives
    if name in ("instrument", "Instrumentation"):
        from . import intercept

        return getattr(intercept, name)
    raise AttributeError(f"module 'longstraw_emit' has no attribute {name!r}")


__version__ = "0.1.0"
__all__ = ["PATHS", "RunWriter", "Group", "collect_artifacts", "build_digest", "tree_digest", "jcs", "jcs_sha256",
           "JcsError", "write_manifest", "ManifestError", "tensor_bytes", "tensor_sha256", "trace_dtype",
           "LayerHooks", "recomputing", "checkpoint", "is_recomputing", "Collectives", "gradient_probe",
           "layer_groups", "instrument", "Instrumentation", "code_artifact", "buffer_digest", "default_digest_alg"]
