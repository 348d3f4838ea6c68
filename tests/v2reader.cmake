# v2reader.cmake - the v2 evidence contract in the readers (docs/contract.md
# §1-2): RFC 8785 JCS of the build identity, v2 traces, receipts and
# manifests, and the audit's v2 rules.
ls_add_criterion_test(test_jcs
  SOURCES test_jcs.c
  LIBS ls_receipts)
# what two build objects differ in, in words (receipts/build_diff.h)
ls_add_criterion_test(test_build_diff
  SOURCES test_build_diff.c
  LIBS ls_receipts)
ls_add_criterion_test(test_trace_v2
  SOURCES test_trace_v2.c test_v2_fixture.c
  LIBS ls_receipts)
ls_add_criterion_test(test_receipts_v2
  SOURCES test_receipts_v2.c test_v2_fixture.c test_receipts_support.c
  LIBS ls_receipts)
ls_add_criterion_test(test_audit_v2
  SOURCES test_audit_v2.c test_v2_fixture.c test_receipts_support.c test_audit_support.c
  LIBS ls_audit)
# collectives.p2p and the output digests of collectives.performed (docs/contract.md §1)
ls_add_criterion_test(test_audit_p2p
  SOURCES test_audit_p2p.c test_v2_fixture.c test_receipts_support.c test_audit_support.c
  LIBS ls_audit)
# parity.dp_grad and the per-world parity rules of a run of data-parallel replicas (config dp_ranks)
ls_add_criterion_test(test_audit_dp
  SOURCES test_audit_dp.c test_v2_fixture.c test_receipts_support.c test_audit_support.c
  LIBS ls_audit)
# parity.build and longstraw-audit diff name what differs between two builds
ls_add_criterion_test(test_audit_build
  SOURCES test_audit_build.c test_v2_fixture.c test_receipts_support.c test_audit_support.c
  LIBS ls_audit)
