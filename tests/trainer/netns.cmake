# CP-4 over two "hosts": two network namespaces joined by a veth, Open MPI's TCP
# transport alone, launched through mpirun's rsh agent (scripts/netns-cluster.sh),
# against CP-4 on one host (shared memory): the checkpoints bitwise equal, the
# receipts naming two hosts, the BTL trace tcp/self only (tests/trainer/netns_cp.sh).
# A machine where namespaces cannot be made (not root, no CAP_NET_ADMIN, no `ip`)
# skips them (exit 77) with the reason.
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  foreach(cfg hybrid-tiny mla-tiny)
    string(REGEX REPLACE "-tiny$" "" family ${cfg})
    add_test(NAME netns_cp_${family}
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/trainer/netns_cp.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}
                     ${CMAKE_CURRENT_BINARY_DIR}/netns-${cfg} ${cfg})
    set_tests_properties(netns_cp_${family} PROPERTIES TIMEOUT 600 LABELS "cp;mpi" SKIP_RETURN_CODE 77
      ENVIRONMENT "${LS_MPI_TEST_ENV};MPIRUN=${MPIEXEC_EXECUTABLE}")
  endforeach()
endif()
