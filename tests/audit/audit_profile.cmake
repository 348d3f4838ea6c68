# The audit's profiles (profiles/, audit/model/profile.h).  audit_profile_golden:
# longstraw-audit's reports (stdout, --json, --junit, exit status) of the
# committed v1 runs of tests/data/profile_golden/ are byte for byte what
# they were before the rules took their requirements from the profiles.
if(TARGET longstraw-audit)
  add_test(NAME audit_profile_golden
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/audit/audit_profile_golden.sh $<TARGET_FILE:longstraw-audit>)
  set_tests_properties(audit_profile_golden PROPERTIES TIMEOUT 300)
endif()
# test_audit_profile: the loader's refusals (missing, not JSON, not schema-valid,
# an undeclared phase or layer kind, too large, another name, a link), the
# shipped profiles' digests, the rules reading the profile (an edited copy of
# hybrid.json changes what a golden run must show), the fault table the reports
# read, a v1 family without a profile (exit 2), and profile.match (v2).
if(TARGET longstraw-audit)
  ls_add_criterion_test(test_audit_profile SOURCES audit/test_audit_profile.c LIBS ls_audit TIMEOUT 300)
  add_dependencies(test_audit_profile longstraw-audit)
endif()
