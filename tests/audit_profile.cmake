# The audit's profiles (profiles/, audit/profile.h).  audit_profile_golden:
# longstraw-audit's reports (stdout, --json, --junit, exit status) of the
# committed v1 runs of tests/data/profile_golden/ are byte for byte what
# they were before the rules took their requirements from the profiles.
if(TARGET longstraw-audit)
  add_test(NAME audit_profile_golden
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/audit_profile_golden.sh $<TARGET_FILE:longstraw-audit>)
  set_tests_properties(audit_profile_golden PROPERTIES TIMEOUT 300)
endif()
