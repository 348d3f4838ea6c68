# v2reader.cmake - the v2 evidence contract in the readers (docs/contract.md
# §1-2): RFC 8785 JCS of the build identity, v2 traces, receipts and
# manifests, and the audit's v2 rules.
ls_add_criterion_test(test_jcs
  SOURCES test_jcs.c
  LIBS ls_receipts)
ls_add_criterion_test(test_trace_v2
  SOURCES test_trace_v2.c test_v2_fixture.c
  LIBS ls_receipts)
ls_add_criterion_test(test_receipts_v2
  SOURCES test_receipts_v2.c test_v2_fixture.c test_receipts_support.c
  LIBS ls_receipts)
ls_add_criterion_test(test_audit_v2
  SOURCES test_audit_v2.c test_v2_fixture.c test_receipts_support.c
  LIBS ls_audit)
