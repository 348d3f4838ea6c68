#!/usr/bin/env python3
"""relayout.py - split receipts/, audit/, parity/ and tests/ into folders that show their layers.

  scripts/relayout.py            run at the repository root: move, rewrite, write the READMEs
  scripts/relayout.py --check    say what would move and whether every file is mapped; change nothing

Idempotent: a file already in its folder stays, a reference already rewritten is left, a README that
exists is kept.  It is written to be run again on a tree that other branches changed since (new
files, edited CMake lists): it never merges moves, it makes them.

What it does, in order, and nothing else (no build, no test):
  1. checks that every file at the top of receipts/, audit/, parity/ and tests/ is in LAYOUT below
     (README.md and CMakeLists.txt stay where they are); a file the table does not map stops the
     script before anything changes, naming it: add it to the table and run again;
  2. in the tests/*.cmake fragments about to move, spells ${CMAKE_CURRENT_LIST_DIR} as
     ${CMAKE_CURRENT_SOURCE_DIR} (the same folder, tests/, before the move);
  3. `git mv`s each file into its folder (a plain rename for a file git does not track);
  4. rewrites the references across the tracked text files (C, headers, CMake lists, docs, scripts,
     Python): the repository path `receipts/x.h` (and `tests/x.c`, ...) becomes the new one,
     anywhere; `#include "x.h"` of a tests/ file (found through tests/ on the include path) is
     spelled from the root; in the CMake lists of the four folders, a bare source name (`x.c`, relative to
     the list's folder) gets its folder, and a `${...}/*.c` glob becomes one per library folder; in
     Python, `os.path.join(..., "tests", "x.py")` gets its folder; then the PATCHES below (what
     depends on a file's depth: `$(dirname "$0")/..`, `__file__`, the tests' CMake functions);
  5. writes each new folder's README.md (its purpose and its `May include:` line) where there is
     none, and a "## Layers" section into the four folders' own README.md where it is missing.

Exit status: 0 done (or, with --check, every file mapped), 1 an unmapped file, a patch whose text is
in neither its old nor its new form, or a git failure (each named on stderr), 2 bad usage or not at
the repository root.
"""
import fnmatch
import os
import re
import subprocess
import sys

# ---------------------------------------------------------------------------------------------
# The table: folder -> subfolder -> (purpose, May include, files).  A subfolder that exists already
# (receipts/tools, tests/fuzz, ...) keeps its README; the files listed move into it.

LAYOUT = {
    "receipts": {
        "format": (
            "What the evidence files are made of, below everything that writes or reads them: JSON "
            "helpers (exact numbers, never NaN, JSON pointers, size-capped reads), atomic file "
            "replacement, SHA-256 digests, JCS canonical JSON, the trace event types and step "
            "metrics, the build identity and what two builds differ in, a parity report's coverage.",
            "common",
            ["atomic_file.c", "atomic_file.h", "build_diff.c", "build_diff.h", "build_info.c",
             "build_info.h", "coverage.c", "coverage.h", "registry_file.c", "registry_file.h", "digest.c", "digest.h", "jcs.c", "jcs.h",
             "json_util.c", "json_util.h", "trace_event.c", "trace_event.h", "trace_step_metrics.c",
             "trace_step_metrics.h"]),
        "schema": (
            "JSON Schema (2020-12) validation of every file the toolkit writes, against schemas/: "
            "the loader and cache (`schema.c`) and the validator (`schema_validate.c`, sharing "
            "`schema_internal.h`, internal to this folder).",
            "receipts/format, common",
            ["schema.c", "schema.h", "schema_internal.h", "schema_validate.c"]),
        "reading": (
            "Reading a trace (`events.jsonl.zst`): the streaming reader with its limits and digests, "
            "the lexer and the decoder.  `trace_lex.h` and `trace_reader_internal.h` are internal "
            "to this folder.",
            "receipts/format, common",
            ["trace_lex.c", "trace_lex.h", "trace_reader.c", "trace_reader.h", "trace_reader_decode.c",
             "trace_reader_internal.h"]),
        "writing": (
            "Writing a run's evidence: the trace writer (JSONL through zstd, `trace_json.h` internal "
            "to this folder) and the per-rank receipt (built, validated, written; "
            "`ls_receipt_parse`/`_read` are here too until they move to reading/).",
            "receipts/schema, receipts/format, common",
            ["trace_json.c", "trace_json.h", "trace_writer.c", "trace_writer.h", "receipt.c",
             "receipt.h"]),
        "signing": (
            "What binds a run: the manifest (every file of the run by digest, written, read and "
            "verified against the run directory) and the DSSE envelope signed over it (Ed25519 "
            "keys, sign, verify).",
            "receipts/writing, receipts/schema, receipts/format, common",
            ["manifest.c", "manifest.h", "dsse.c", "dsse.h"]),
    },
    "audit": {
        "model": (
            "The run model the audit builds and every rule reads (`audit.h`: the types of runs, "
            "ranks, steps, rules and levels, and the vocabularies of phases, layer kinds and step "
            "figures, `vocab.c`), the untrusted run directory's files read safely (`run_files.h`), the "
            "profiles a run is held to (`profile.h`) and the canonical description of a run from "
            "every source (`describe.h`).",
            "receipts, common",
            ["audit.h", "vocab.c", "run_files.c", "run_files.h", "profile.c", "profile.h", "describe.c",
             "describe.h", "describe_fields.c"]),
        "rules": (
            "The rules as a registry (`rule.c`: added, failed with bounded evidence, closed, found "
            "by id) and the rule modules: files, ranks, cross-rank, point-to-point, invariants, "
            "probes, the profile's, scope, what was performed, the step sequence and layers "
            "(`rank_seq.c`, `rank_steps.c`), the parity rules and the levels (`levels.c`).",
            "audit/model, receipts, common",
            ["rules.h", "rule.c", "rules.c", "rules_cross.c", "rules_invariants.c", "rules_p2p.c",
             "rules_performed.c", "rules_probe.c", "rules_profile.c", "rules_rank.c", "rules_scope.c",
             "rank_seq.c", "rank_steps.c", "levels.c", "rule_ids.c"]),
        "load": (
            "Loading a run into the model: the manifest and its signature, receipts, each rank's "
            "trace streamed (the step checks of rules/ fed as it streams), the parity report; and "
            "the trace paths and timeline (`timeline.h`; the Chrome trace writer belongs in "
            "report/).",
            "audit/rules, audit/model, receipts, common",
            ["load.h", "load.c", "load_manifest.c", "load_parity.c", "load_trace.c", "timeline.c", "timeline.h"]),
        "report": (
            "What the audit says: text, JSON and JUnit reports, what each level rests on "
            "(`basis.h`), the HTML page, and `diff` (two runs compared, each verified first).",
            "audit/load, audit/rules, audit/model, receipts, common",
            ["report.h", "report_json.c", "report_junit.c", "report_text.c", "basis.c", "basis.h", "html.c",
             "html.h", "diff.c", "diff.h", "diff_cli.c"]),
        "cli": (
            "`longstraw-audit`'s `main`: the command line, exit status and which report it writes.",
            "audit/report, audit/load, audit/rules, audit/model, receipts, common",
            ["audit_main.c", "audit_names.c", "audit_names.h"]),
    },
    "parity": {
        "plan": (
            "What runs: the tool's contract (`parity.h`, `parity_adapter.h`: options, the matrix, "
            "checks, the report's types), the reduced-size matrix, `--like RUN` (the run's "
            "configuration and its path: sampling, keep-reference, prompts per step, shard/page/chunk "
            "classes) and an adapter file, loaded and shaped by its run.",
            "receipts, common",
            ["parity.h", "parity_adapter.h", "parity_matrix.c", "parity_like.c", "parity_path.c",
             "parity_adapter_load.c", "parity_adapter_like.c"]),
        "launch": (
            "Running it: trainer command lines (`parity_train.c`), the process pool "
            "(`parity_proc.c`), the runs of one matrix (`parity_run.c`) and an adapter's runs "
            "(`parity_adapter_run.c`, `parity_adapter_sampled.c`).",
            "parity/plan, receipts, common",
            ["parity_proc.c", "parity_train.c", "parity_run.c", "parity_adapter_run.c",
             "parity_adapter_sampled.c"]),
        "compare": (
            "Comparing what the runs wrote: reading their gradients, weights, log-probs and losses "
            "(`parity_runs.c`), finite differences (`parity_fd.c`, `parity_adapter_fd.c`) and no "
            "verdict across a near-tie (`parity_decisions.c`).",
            "parity/plan, trainer/base, receipts, common",
            ["parity_runs.c", "parity_fd.c", "parity_adapter_fd.c", "parity_decisions.c"]),
        "report": (
            "The parity report: parity.json (schemas/parity.schema.json) and the table on stdout.",
            "parity/plan, receipts, common",
            ["parity_report.c"]),
        "cli": (
            "`longstraw-parity`'s `main`: the command line, the signing of the report, the exit status.",
            "parity/plan, receipts, common",
            ["parity_main.c"]),
    },
    "tests": {
        "audit": (
            "Tests of longstraw-audit (audit/): levels and rules on runs the trainer makes and on "
            "damaged copies, forensics, hostile inputs, invariants, profiles, the step sequence, "
            "diff, the HTML page and timeline, the v2 readers.",
            "audit, receipts, tests/support, common",
            ["audit.cmake", "audit_diff.cmake", "audit_evidence.cmake", "audit_forensics.cmake",
             "audit_hostile.cmake", "audit_invariants.cmake", "audit_invariants_edit.py",
             "audit_profile.cmake", "audit_profile_golden.sh", "audit_sequence.cmake", "audit_sequence.sh",
             "audit_sequence_edit.py", "audit_viz.cmake", "v2reader.cmake", "test_audit.c",
             "test_audit_build.c", "test_audit_describe.c", "test_audit_diff.c", "test_audit_dp.c",
             "test_audit_forensics.c", "test_audit_hostile.c", "test_audit_invariants.c",
             "test_audit_p2p.c", "test_audit_profile.c", "test_audit_support.c", "test_audit_support.h",
             "test_audit_v2.c", "test_audit_viz.c", "test_audit_rule_ids.c"]),
        "parity": (
            "Tests of longstraw-parity (parity/): the matrix, the table of the original work's "
            "reports, finite differences, the run's path, adapters (with stand-in trainers) and DP.",
            "parity, trainer/base, receipts, tests/support, common",
            ["parity.cmake", "parity_adapter_fake_train.py", "parity_fd_fake_train.py", "test_parity.c",
             "test_parity_adapter.c", "test_parity_adapter_dp.c", "test_parity_adapter_support.c",
             "test_parity_adapter_support.h", "test_parity_adapter_train.c", "test_parity_fd.c",
             "test_parity_path.c", "test_parity_table.c"]),
        "receipts": (
            "Tests of receipts/: receipts, manifests, DSSE, the schema validator against a "
            "reference validator (`schema_ref.c`), JCS, traces (round trip, reader, kill, big "
            "reads, metrics), build digests and provenance.",
            "receipts, trainer, tests/support, common",
            ["receipts.cmake", "trace.cmake", "build_digest.cmake", "provenance.cmake",
             "build_digest_probe.c", "schema_ref.c", "schema_ref.h", "test_build_diff.c",
             "test_build_digest.c", "test_jcs.c", "test_provenance.c", "test_receipts.c",
             "test_receipts_dsse.c", "test_receipts_steps.c", "test_receipts_v2.c", "test_schema.c",
             "test_trace_bigread.c", "test_trace_kill.c", "test_trace_metrics.c", "test_trace_parse.c",
             "test_trace_reader.c", "test_trace_roundtrip.c", "test_trace_schema.c",
             "test_trace_util.h", "test_trace_v2.c"]),
        "kernels": (
            "Tests of kernels/: each kernel against finite differences and a different composition "
            "of the same math, float32 against float64 (through the `*_f32_wrap` libraries), the "
            "ISA paths, the scratch hook.",
            "kernels, trainer, tests/support, common",
            ["kernels_core.cmake", "kernels_mla.cmake", "kernels_seq.cmake", "kernel_isa.sh",
             "kernels_core_f32_wrap.c", "kernels_core_f32_wrap.h", "kernels_mla_f32_wrap.c",
             "kernels_seq_f32_wrap.c", "kernels_seq_f32_wrap.h", "test_kernel_scratch.c",
             "test_kernels_attn_paged.c", "test_kernels_attn_perf.c", "test_kernels_core_f32.c",
             "test_kernels_core_fd.c", "test_kernels_core_ref.c", "test_kernels_mla.h",
             "test_kernels_mla_attn.c", "test_kernels_mla_common.c", "test_kernels_mla_dsa.c",
             "test_kernels_mla_f32.c", "test_kernels_mla_moe.c", "test_kernels_seq_chunk.c",
             "test_kernels_seq_f32.c", "test_kernels_seq_fd.c", "test_kernels_seq_pieces.c"]),
        "trainer": (
            "Tests of trainer/ and longstraw-train: the base (memory tracker, safetensors), "
            "configs and parameters, both families' steps and CP, the communicator, EP, "
            "checkpoints, the plan, sampling, the replay's checkpointed and chunked forms, "
            "determinism, memory, probes and end-to-end runs (shell drivers with their checks).",
            "trainer, kernels, receipts, tests/support, tests/fuzz, common",
            ["trainer.cmake", "checkpoint.cmake", "comm.cmake", "cp.cmake", "determinism.cmake",
             "ep.cmake", "foundation.cmake", "learn_mini.cmake", "memory.cmake", "netns.cmake",
             "peer.cmake", "plan.cmake", "plot.cmake", "probe.cmake", "prompts_per_step.cmake",
             "sampler.cmake", "train_cp.cmake", "cp_paths.sh", "cp_paths_check.py", "determinism.sh",
             "ep_audit.sh", "ep_audit_edit.py", "ep_compare.py", "ep_parity.sh", "ep_train.sh",
             "learn_mini.sh", "netns_cp.sh", "plan_original.py", "probe.sh", "probe_check.py",
             "prompts_per_step.sh", "prompts_per_step_check.py", "replay_checkpoint.sh",
             "state_tier.sh", "test_batch.c", "test_checkpoint.c", "test_coll_memo.c", "test_comm.c",
             "test_config.c", "test_cp.c", "test_cp_checks.h", "test_hybrid_fd.c",
             "test_hybrid_step.c", "test_hybrid_util.h", "test_mem_tracker.c", "test_memory_rss.c",
             "test_mla.c", "test_mla_cp.c", "test_mla_cp_cli.c", "test_mla_cp_train.c",
             "test_mla_train.c", "test_mpi_harness.h", "test_params.c", "test_plan_cli.c",
             "test_plan_dtype.c", "test_plan_flops.c", "test_plan_hf.c", "test_plot.c",
             "test_replay_chunk.c", "test_safetensors.c", "test_sampler.c", "test_step_features.c",
             "test_task_recall.c", "test_train_cli.c", "test_train_cp.c", "test_train_loop.c",
             "test_cli_opts.c", "test_comm_registry.c", "test_model_config.h", "test_mem_space.c", "test_stage_space.c", "test_family.c"]),
        "support": (
            "What tests of several areas share: temporary directories (`test_tmpdir.h`), numeric "
            "helpers (`test_util.h`), the trainer's command line (`test_cli_util.h`), the receipts "
            "test support and the v2 fixture (C), `case_lib.sh` (the shell tests' ok/bad/failed) "
            "and the LeakSanitizer suppressions of Open MPI (`comm_lsan.supp`).",
            "receipts, common",
            ["case_lib.sh", "comm_lsan.supp", "test_cli_util.h", "test_tmpdir.h", "test_util.h",
             "test_receipts_support.c", "test_receipts_support.h", "test_v2_fixture.c",
             "test_v2_fixture.h", "test_parity_report.h", "test_text.h"]),
        "tools": (
            "Checks of the repository itself: the layering (`check_layers.py`), the documentation's "
            "examples script, code search with LS_K expanded (`code_search.sh`).",
            "nothing",
            ["layers.cmake", "check_layers.py", "doc_examples_check.py", "code_search.cmake",
             "code_search.sh", "vocab.cmake", "check_vocab.py", "family_schemas_check.py"]),
        "reference": (None, None, ["reference.cmake"]),
    },
}

# Files at a folder's top that stay there, handled by name (their references are rewritten).
STAY = {"README.md", "CMakeLists.txt"}

# Subfolders that take no new file but exist (kept as they are): listed so that the script can say
# what the layout is.
KEPT_SUBFOLDERS = {
    "receipts": ["tools"],
    "tests": ["evidence", "examples", "fuzz", "python", "reference"],
}

# Library subfolders whose sources are not the library's (executables): left out of the globs.
EXECUTABLE_SUBFOLDERS = {"cli", "tools"}

# What depends on a file's depth or on the tests' CMake functions: (path after the move, old text,
# new text).  Applied when the old text is there; skipped when the new text is; else an error.
DIRNAME_SRC = ('SRC=$(cd "$(dirname "$0")/.." && pwd)', 'SRC=$(cd "$(dirname "$0")/../.." && pwd)')
CASE_LIB = ('. "$(dirname "$0")/case_lib.sh"', '. "$(dirname "$0")/../support/case_lib.sh"')
EVIDENCE_PY = ('os.path.join(os.path.dirname(os.path.abspath(__file__)), "evidence")',
               'os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "evidence")')
ROOT_PY = ('ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))',
           'ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))')
PATCHES = [
    ("tests/CMakeLists.txt",
     "file(GLOB LS_TEST_FRAGMENTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cmake)",
     "file(GLOB LS_TEST_FRAGMENTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cmake\n"
     "     ${CMAKE_CURRENT_SOURCE_DIR}/*/*.cmake)"),
    ("tests/CMakeLists.txt",
     "# Tests: every tests/*.cmake fragment declares the tests of one area with\n"
     "# ls_add_criterion_test (one fragment per area, so areas never edit one file).",
     "# Tests: one folder per area (tests/audit, tests/kernels, tests/parity, tests/receipts,\n"
     "# tests/trainer, tests/tools; what several share in tests/support), each with its *.cmake\n"
     "# fragments declaring its tests with ls_add_criterion_test (one fragment per feature, so areas\n"
     "# never edit one file).  Fragments are include()d: source paths in them are relative to tests/."),
    ("tests/CMakeLists.txt",
     "# the plain-main float64 program tests/NAME.c on ls_trainer_f64, run alone",
     "# the plain-main float64 program NAME.c beside the fragment that declares it (tests/AREA/NAME.c)\n"
     "# on ls_trainer_f64, run alone"),
    ("tests/CMakeLists.txt",
     "add_executable(${name} ${CMAKE_CURRENT_SOURCE_DIR}/${name}.c)",
     "add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/${name}.c)"),
    ("receipts/CMakeLists.txt",
     "# Every receipts/*.c is library code except tools/*.c, each of which is one executable.",
     "# Every receipts/<layer>/*.c is library code (format, schema, reading, writing, signing);\n"
     "# each tools/*.c is one executable."),
    ("tests/audit/audit_invariants_edit.py",) + EVIDENCE_PY,
    ("tests/audit/audit_sequence_edit.py",) + EVIDENCE_PY,
    ("tests/trainer/ep_audit_edit.py",) + EVIDENCE_PY,
    ("tests/tools/doc_examples_check.py",) + ROOT_PY,
    ("tests/trainer/plan_original.py",) + ROOT_PY,
    ("tests/audit/audit_profile_golden.sh",
     'here=$(cd "$(dirname "$0")/data/profile_golden" && pwd)',
     'here=$(cd "$(dirname "$0")/../data/profile_golden" && pwd)'),
    ("tests/audit/audit_sequence.sh", 'SRC=$(cd "$HERE/.." && pwd)', 'SRC=$(cd "$HERE/../.." && pwd)'),
    ("tests/audit/audit_sequence.sh",) + CASE_LIB,
    ("tests/trainer/ep_parity.sh",) + DIRNAME_SRC,
    ("tests/trainer/ep_parity.sh",) + CASE_LIB,
    ("tests/kernels/kernel_isa.sh",) + DIRNAME_SRC,
    ("tests/kernels/kernel_isa.sh",) + CASE_LIB,
    ("tests/trainer/replay_checkpoint.sh",) + DIRNAME_SRC,
    ("tests/trainer/replay_checkpoint.sh",) + CASE_LIB,
    ("tests/trainer/state_tier.sh",) + DIRNAME_SRC,
    ("tests/trainer/state_tier.sh",) + CASE_LIB,
    ("tests/trainer/probe.sh", 'SRC=$(dirname "$HERE")', 'SRC=$(dirname "$(dirname "$HERE")")'),
    ("tests/data/parity_adapter_fake.json", '"{dir}/../parity_adapter_fake_train.py"',
     '"{dir}/../parity/parity_adapter_fake_train.py"'),
    ("tests/data/parity_adapter_fake_dp.json", '"{dir}/../parity_adapter_fake_train.py"',
     '"{dir}/../parity/parity_adapter_fake_train.py"'),
]

# Text files whose references are rewritten (by name or suffix); data folders are left alone.
TEXT_SUFFIXES = (".c", ".h", ".cu", ".cuh", ".cmake", ".txt", ".md", ".py", ".sh", ".json", ".yml",
                 ".yaml", ".libs", ".supp", ".ctags", ".toml", ".cfg", ".in")
TEXT_NAMES = {"run", "Makefile", ".gitignore"}
DATA_PREFIXES = ("tests/fixtures/", "tests/data/", "tests/fuzz/corpus/", "tests/fuzz/selftest/")
# ... except these, which name moved files (a run's recorded files are digested: never rewritten)
DATA_TEXT = {"tests/data/parity_adapter_fake.json", "tests/data/parity_adapter_fake_dp.json",
             "tests/data/profile_golden/make_runs.sh", "tests/data/hf/README.md"}
SELF = "scripts/relayout.py"


def die(code, msg):
    print(f"relayout: {msg}", file=sys.stderr)
    sys.exit(code)


def git(*args, check=True):
    r = subprocess.run(["git", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        die(1, f"git {' '.join(args)}: {r.stderr.strip()}")
    return r


def moves_of():
    """(old repo path -> new repo path) for every file of LAYOUT, and (folder -> name -> sub)."""
    moves, where = {}, {}
    for folder, subs in LAYOUT.items():
        where[folder] = {}
        for sub, (_, _, files) in subs.items():
            for name in files:
                if name in where[folder]:
                    die(1, f"LAYOUT maps {folder}/{name} twice ({where[folder][name]}, {sub})")
                where[folder][name] = sub
                moves[f"{folder}/{name}"] = f"{folder}/{sub}/{name}"
    return moves, where


def unmapped(where):
    """Files at the top of the four folders that the table does not place."""
    bad = []
    for folder in LAYOUT:
        if not os.path.isdir(folder):
            die(2, f"{folder}/: missing (run at the repository root)")
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and name not in STAY and name not in where[folder]:
                bad.append(path)
    return bad


def tracked():
    return set(git("ls-files").stdout.splitlines())


def is_text(path):
    if path == SELF or (path.startswith(DATA_PREFIXES) and path not in DATA_TEXT):
        return False
    base = os.path.basename(path)
    return base in TEXT_NAMES or base.endswith(TEXT_SUFFIXES) or base == "CMakeLists.txt"


def read(path):
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return f.read()


def write(path, text):
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)


# ---- the rewriting rules --------------------------------------------------------------------------

def path_rule(moves):
    """A repository path of a moved file, anywhere: not inside a longer name or path component."""
    alts = "|".join(re.escape(p) for p in sorted(moves, key=len, reverse=True))
    rx = re.compile(r"(?<![A-Za-z0-9_.\-])(" + alts + r")(?![A-Za-z0-9_\-]|\.[A-Za-z0-9])")
    return lambda text: rx.sub(lambda m: moves[m.group(1)], text)


def glob_path_rule(where):
    """A repository path with a wildcard (`tests/test_kernels_*_fd.c`, `audit/rules_*.c`): given the
    folder when every file of the table it matches lies in one."""
    rx = re.compile(r"(?<![A-Za-z0-9_.\-])(" + "|".join(LAYOUT) + r")/([A-Za-z0-9_.\-]*\*[A-Za-z0-9_.*\-]*)")

    def sub(m):
        folder, pattern = m.group(1), m.group(2)
        if m.string.endswith("tests/", 0, m.start()):
            return m.group(0)  # tests/audit/..., already a tests/ area
        subs = {s for n, s in where[folder].items() if fnmatch.fnmatchcase(n, pattern)}
        return f"{folder}/{subs.pop()}/{pattern}" if len(subs) == 1 else m.group(0)

    return lambda text: rx.sub(sub, text)


def bare_rule(names):
    """A bare file name relative to a CMake list's folder (a source in a list, ${DIR}/name): the
    name preceded by a blank, a parenthesis, a quote or `}/` (not by `tests/` or another folder),
    followed by a blank, a parenthesis, a quote, `;`, `:`, `,` or the line's end; names with ${var} in them too,
    when every file they can name lies in one folder."""
    if not names:
        return lambda text: text
    alts = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    lead = r"(?:(?<=[\s(\"])|(?<=\}/))"
    tail = r"(?=[\s)\";:,]|$)"
    rx = re.compile(lead + r"(" + alts + r")" + tail, re.M)
    rx_var = re.compile(lead + r"([A-Za-z0-9_.]*\$\{[A-Za-z0-9_]+\}[A-Za-z0-9_.${}]*)" + tail, re.M)

    def binary_dir(text, start):
        return text[max(0, start - 12):start].endswith("BINARY_DIR}/")

    def sub_name(m):
        if binary_dir(m.string, m.start()):
            return m.group(0)
        return names[m.group(1)] + "/" + m.group(1)

    def sub_var(m):
        token = m.group(1)
        if binary_dir(m.string, m.start()):
            return token
        pattern = re.sub(r"\$\{[A-Za-z0-9_]+\}", "*", token)
        if pattern.strip("*") == "" or "." not in pattern:
            return token
        subs = {names[n] for n in names if fnmatch.fnmatchcase(n, pattern)}
        return f"{subs.pop()}/{token}" if len(subs) == 1 else token

    return lambda text: rx_var.sub(sub_var, rx.sub(sub_name, text))


def include_rule(test_names):
    """`#include "x.h"` of a tests/ file, found through tests/ on the include path (tests/, bench/),
    spelled from the root (a basename is unique in the tree: tests/check_layers.py)."""
    rx = re.compile(r'^(\s*#\s*include\s+")([^"/]+|[^"]+/[^"]+)(")', re.M)

    def sub(m):
        inc = m.group(2)
        if inc in test_names:
            return f"{m.group(1)}tests/{test_names[inc]}/{inc}{m.group(3)}"
        if "/" in inc and not os.path.isfile(inc) and os.path.isfile(os.path.join("tests", inc)):
            return f"{m.group(1)}tests/{inc}{m.group(3)}"
        return m.group(0)

    return lambda text: rx.sub(sub, text)


def python_join_rule(test_names):
    """os.path.join(..., "tests", "x.py") -> os.path.join(..., "tests", "area", "x.py")."""
    alts = "|".join(re.escape(n) for n in sorted(test_names, key=len, reverse=True))
    rx = re.compile(r"""(["'])tests\1(\s*,\s*)(["'])(""" + alts + r""")\3""")
    return lambda text: rx.sub(lambda m: f"{m.group(1)}tests{m.group(1)}{m.group(2)}{m.group(3)}"
                               f"{test_names[m.group(4)]}{m.group(3)}{m.group(2)}{m.group(3)}"
                               f"{m.group(4)}{m.group(3)}", text)


def glob_rule(folder):
    """`${CMAKE_CURRENT_SOURCE_DIR}/*.c` in a split folder's list: one glob per library folder."""
    subs = [s for s in LAYOUT[folder] if s not in EXECUTABLE_SUBFOLDERS]
    new = " ".join("${CMAKE_CURRENT_SOURCE_DIR}/" + s + "/*.c" for s in subs)
    return lambda text: text.replace("${CMAKE_CURRENT_SOURCE_DIR}/*.c", new)


# ---- READMEs --------------------------------------------------------------------------------------

def files_line(folder, sub):
    files = LAYOUT[folder][sub][2]
    headers = [f for f in files if f.endswith(".h")]
    others = [f for f in files if not f.endswith(".h")]
    parts = []
    if headers:
        parts.append("Headers: " + ", ".join(f"`{h}`" for h in headers) + ".")
    if others:
        parts.append("Files: " + ", ".join(f"`{o}`" for o in others) + ".")
    return "  ".join(parts)


def write_readmes(changed):
    for folder, subs in LAYOUT.items():
        for sub, (purpose, may, _) in subs.items():
            path = f"{folder}/{sub}/README.md"
            if purpose is None or os.path.exists(path):
                continue
            text = (f"# {folder}/{sub}/\n\n{purpose}\n\nMay include: {may}\n\n"
                    f"## Contents\n{files_line(folder, sub)}  Every include is spelled from the "
                    f"repository root (`#include \"{folder}/{sub}/...\"`).\n")
            write(path, text)
            changed.append(path)
        top = f"{folder}/README.md"
        section = layers_section(folder)
        if os.path.exists(top):
            text = read(top)
            if section.split("\n")[0] + "\n" not in text:
                write(top, text.rstrip("\n") + "\n\n" + section)
                changed.append(top)
        else:
            write(top, f"# {folder}/\n\n" + section)
            changed.append(top)


def layers_section(folder):
    title = "## Areas" if folder == "tests" else "## Layers"
    if folder == "tests":
        intro = ("One folder per area, each with its README.md and `May include:` line "
                 "(tests/tools/check_layers.py); ctest names do not depend on the folder:")
    else:
        intro = ("One folder per layer, each with its README.md and `May include:` line "
                 "(tests/tools/check_layers.py); includes run one way, bottom up:")
    lines = [title, intro]
    kept = list(KEPT_SUBFOLDERS.get(folder, []))
    for sub, (purpose, may, _) in LAYOUT[folder].items():
        if purpose is None:
            kept.append(sub)
            continue
        lines.append(f"- `{sub}/` (may include: {may}): {purpose}")
    for k in sorted(set(kept)):
        lines.append(f"- `{k}/`: see its README.md.")
    if folder == "tests":
        lines.append("- `data/`, `fixtures/`: what the tests read (no code).")
    return "\n".join(lines) + "\n"


# ---- main -----------------------------------------------------------------------------------------

def main(argv):
    if any(a not in ("--check",) for a in argv):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        die(2, f"unknown argument {[a for a in argv if a != '--check'][0]!r}")
    if not (os.path.isfile("docs/design.md") and (os.path.isdir(".git") or os.path.isfile(".git"))):
        die(2, "run at the repository root (docs/design.md and .git are not here)")
    moves, where = moves_of()
    bad = unmapped(where)
    if bad:
        for p in bad:
            print(f"relayout: {p}: not in the LAYOUT table of {SELF} (add it to a folder, then run again)",
                  file=sys.stderr)
        return 1
    todo = []
    for old, new in sorted(moves.items()):
        if os.path.exists(old) and os.path.exists(new):
            die(1, f"{old} and {new} both exist: merge them by hand first")
        if os.path.exists(old):
            todo.append((old, new))
        elif not os.path.exists(new):
            print(f"relayout: note: {old} is in the table but in neither place (removed?)", file=sys.stderr)
    if "--check" in argv:
        for old, new in todo:
            print(f"{old} -> {new}")
        print(f"relayout: every file mapped; {len(todo)} to move", file=sys.stderr)
        return 0

    # 2. fragments about to move: ${CMAKE_CURRENT_LIST_DIR} is tests/ before the move
    for old, _ in todo:
        if old.startswith("tests/") and old.endswith(".cmake"):
            text = read(old)
            if "${CMAKE_CURRENT_LIST_DIR}" in text:
                write(old, text.replace("${CMAKE_CURRENT_LIST_DIR}", "${CMAKE_CURRENT_SOURCE_DIR}"))

    # 3. the moves
    in_git = tracked()
    for old, new in todo:
        os.makedirs(os.path.dirname(new), exist_ok=True)
        if old in in_git:
            git("mv", old, new)
        else:
            os.rename(old, new)

    # 4. the references
    test_names = {n: s for n, s in where["tests"].items()}
    rules_all = [path_rule(moves), glob_path_rule(where)]
    rule_tests_c = include_rule(test_names)
    rule_py = python_join_rule(test_names)
    rule_tests_cmake = bare_rule(test_names)
    lib_rules = {f: (bare_rule(where[f]), glob_rule(f)) for f in ("receipts", "audit", "parity")}
    changed = []
    files = sorted(p for p in tracked() | {n for _, n in todo} if os.path.isfile(p) and is_text(p))
    for path in files:
        text = read(path)
        new = text
        for rule in rules_all:
            new = rule(new)
        if path.endswith((".c", ".h")):
            new = rule_tests_c(new)
        if path.endswith(".py"):
            new = rule_py(new)
        if path.startswith("tests/") and (path.endswith(".cmake") or path == "tests/CMakeLists.txt"):
            new = rule_tests_cmake(new)
        for f, (bare, glob) in lib_rules.items():
            if path == f"{f}/CMakeLists.txt":
                new = glob(bare(new))
        if new != text:
            write(path, new)
            changed.append(path)

    # the patches
    failed = 0
    for path, old, new in PATCHES:
        if not os.path.isfile(path):
            print(f"relayout: patch for {path}: no such file", file=sys.stderr)
            failed += 1
            continue
        text = read(path)
        if old in text:
            write(path, text.replace(old, new))
            changed.append(path)
        elif new not in text:
            print(f"relayout: patch for {path}: neither {old!r} nor {new!r} is there (edit the PATCHES "
                  f"entry to what the file says now)", file=sys.stderr)
            failed += 1

    # 5. READMEs
    write_readmes(changed)
    print(f"relayout: {len(todo)} files moved, {len(set(changed))} files rewritten"
          + (f", {failed} patches failed" if failed else ""), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
