# audit/v2reader.cmake - the v2 evidence contract in the readers (docs/contract.md
# §1-2): RFC 8785 JCS of the build identity, v2 traces, receipts and
# manifests, and the audit's v2 rules.
ls_add_criterion_test(test_jcs
  SOURCES receipts/test_jcs.c
  LIBS ls_receipts)
# what two build objects differ in, in words (receipts/format/build_diff.h)
ls_add_criterion_test(test_build_diff
  SOURCES receipts/test_build_diff.c
  LIBS ls_receipts)
ls_add_criterion_test(test_trace_v2
  SOURCES receipts/test_trace_v2.c support/test_v2_fixture.c
  LIBS ls_receipts)
ls_add_criterion_test(test_receipts_v2
  SOURCES receipts/test_receipts_v2.c support/test_v2_fixture.c support/test_receipts_support.c
  LIBS ls_receipts)
ls_add_criterion_test(test_audit_v2
  SOURCES audit/test_audit_v2.c support/test_v2_fixture.c support/test_receipts_support.c audit/test_audit_support.c
  LIBS ls_audit)
# collectives.p2p and the output digests of collectives.performed (docs/contract.md §1)
ls_add_criterion_test(test_audit_p2p
  SOURCES audit/test_audit_p2p.c support/test_v2_fixture.c support/test_receipts_support.c audit/test_audit_support.c
  LIBS ls_audit)
# parity.dp_grad and the per-world parity rules of a run of data-parallel replicas (config dp_ranks)
ls_add_criterion_test(test_audit_dp
  SOURCES audit/test_audit_dp.c support/test_v2_fixture.c support/test_receipts_support.c audit/test_audit_support.c
  LIBS ls_audit)
# parity.build and longstraw-audit diff name what differs between two builds
ls_add_criterion_test(test_audit_build
  SOURCES audit/test_audit_build.c support/test_v2_fixture.c support/test_receipts_support.c audit/test_audit_support.c
  LIBS ls_audit)
