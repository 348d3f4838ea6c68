# longstraw-audit against hostile run directories (ISSUE 10, "Hostile input"):
# unsafe subject names, links leaving the run, FIFOs, declared sizes beyond
# the file, a zstd bomb, deeply nested and enormous JSON; each derived from a
# real trainer run, audited in-process (in a child: no crash, VmHWM bounded)
# and through the CLI (exit codes, --timeline, --html, diff).
if(TARGET longstraw-audit)
  ls_add_criterion_test(test_audit_hostile SOURCES audit/test_audit_hostile.c LIBS ls_audit TIMEOUT 300)
  add_dependencies(test_audit_hostile longstraw-audit longstraw-train)
endif()
