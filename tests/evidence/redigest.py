#!/usr/bin/env python3
"""redigest.py RUN [--receipts]: what an adversary with write access does after
editing a run's files: recompute every digest the manifest holds (its subjects)
so that only the audit's cross-checks of the facts themselves can notice; with
--receipts, each receipt's digest of its trace first (run_edit.redigest)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_edit import redigest  # noqa: E402

if __name__ == "__main__":
    redigest(sys.argv[1], "--receipts" in sys.argv[2:])
