# The in-run gradient probe (tests/trainer/probe.sh): longstraw-train --probe-every K passes fault-free (both families,
# f64 and f32; mla in f32 states it cannot resolve), fails under the faults that corrupt the applied gradient
# (cp-stale-start, skip-dkv-reduce, skip-grad-finalize at CP-2), reports in detached mode, restores the weights
# bit for bit, and leaves every audit verdict but run.probe's as it was; the audit's run.probe and
# --require-probe.  Under mpirun (when there is MPI) also at CP-2.  About 30 s on 2 cores.
if(MPIEXEC_EXECUTABLE)
  add_test(NAME probe
           COMMAND ${CMAKE_COMMAND} -E env "MPIEXEC=${MPIEXEC_EXECUTABLE}" "MPIRUN_FLAGS=${LS_MPIRUN_FLAGS_STR}"
                   ${CMAKE_SOURCE_DIR}/tests/trainer/probe.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(probe PROPERTIES TIMEOUT 600 ENVIRONMENT "${LS_MPI_TEST_ENV}")
else()
  add_test(NAME probe COMMAND ${CMAKE_SOURCE_DIR}/tests/trainer/probe.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(probe PROPERTIES TIMEOUT 600)
endif()
