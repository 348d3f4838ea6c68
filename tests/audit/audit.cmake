# longstraw-audit (audit/): levels, rules and evidence against runs the
# trainer makes (single rank; CP-2 under mpirun when MPI is found) and
# damaged copies of them; the dependency rule checked on the built binary.
if(TARGET longstraw-audit)
  set(LS_AUDIT_TEST_DEFS "")
  if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
    set(LS_AUDIT_TEST_DEFS LS_MPIEXEC="${MPIEXEC_EXECUTABLE}" LS_MPIRUN_FLAGS="${LS_MPIRUN_FLAGS_STR}")
  endif()
  ls_add_criterion_test(test_audit SOURCES audit/test_audit.c LIBS ls_receipts DEFS ${LS_AUDIT_TEST_DEFS} TIMEOUT 600)
  add_dependencies(test_audit longstraw-audit longstraw-train longstraw-sign)
  if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
    set_tests_properties(test_audit PROPERTIES ENVIRONMENT "${LS_MPI_TEST_ENV}")
  endif()
  # docs/design.md §2: no symbol of the trainer or kernels libraries is defined in
  # the audit executable (the configure-time check covers the link graph).
  add_test(NAME test_audit_deps COMMAND sh -c
    "exe=$1; out=$2; shift 2; nm --defined-only -g \"$exe\" | awk 'NF==3 {print $3}' | sort -u > \"$out\" && for l in \"$@\"; do nm --defined-only -g \"$l\" 2>/dev/null | awk 'NF==3 && $2 ~ /^[TDBR]$/ {print $3}'; done | sort -u > \"$out.lib\" && test -s \"$out.lib\" && ! comm -12 \"$out\" \"$out.lib\" | grep ."
    sh $<TARGET_FILE:longstraw-audit> ${CMAKE_CURRENT_BINARY_DIR}/audit_syms.txt
    $<TARGET_FILE:ls_trainer_base> $<TARGET_FILE:ls_trainer_core> $<TARGET_FILE:ls_trainer_f32>
    $<TARGET_FILE:ls_trainer_f64> $<TARGET_FILE:ls_kernels_base> $<TARGET_FILE:ls_kernels_f32> $<TARGET_FILE:ls_kernels_f64>)
endif()

# The canonical description (audit/model/describe.h): every schema field a fact or a reason; the fold.
if(TARGET ls_audit)
  ls_add_criterion_test(test_audit_describe SOURCES audit/test_audit_describe.c LIBS ls_audit)
  # the one list of rule ids (audit/rules/rule_ids.c): an unlisted id fails its rule
  ls_add_criterion_test(test_audit_rule_ids SOURCES audit/test_audit_rule_ids.c LIBS ls_audit)
endif()
