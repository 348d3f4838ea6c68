# receipts/receipts.cmake - tests of the receipts layer (atomic files, digests, build
# info, receipts, manifests, DSSE, the schema validator and the agreement of
# every schema in schemas/ with its fixtures under both validators).
set(LS_RECEIPTS_TEST_SUPPORT ${CMAKE_CURRENT_SOURCE_DIR}/support/test_receipts_support.c)

ls_add_criterion_test(test_receipts
  SOURCES receipts/test_receipts.c ${LS_RECEIPTS_TEST_SUPPORT}
  LIBS ls_receipts
  TIMEOUT 120)

# a run's config against the registry of model families (the build's generated/families.json)
ls_add_criterion_test(test_registry_config
  SOURCES receipts/test_registry_config.c ${LS_RECEIPTS_TEST_SUPPORT}
  LIBS ls_receipts
  TIMEOUT 60)
add_dependencies(test_registry_config longstraw-train)

ls_add_criterion_test(test_receipts_steps
  SOURCES receipts/test_receipts_steps.c ${LS_RECEIPTS_TEST_SUPPORT}
  LIBS ls_receipts
  TIMEOUT 120)

ls_add_criterion_test(test_receipts_dsse
  SOURCES receipts/test_receipts_dsse.c ${LS_RECEIPTS_TEST_SUPPORT}
  LIBS ls_receipts
  TIMEOUT 120)
# the tool tests run the executables
add_dependencies(test_receipts_dsse longstraw-sign longstraw-validate)

ls_add_criterion_test(test_schema
  SOURCES receipts/test_schema.c receipts/schema_ref.c ${LS_RECEIPTS_TEST_SUPPORT}
  LIBS ls_receipts
  TIMEOUT 300)
# the differential test validates a real trainer run
add_dependencies(test_schema longstraw-train)
