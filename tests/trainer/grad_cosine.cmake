# --grad-cosine-every N (tests/trainer/grad_cosine.sh): the measured run's checkpoint, gradients and figures are the
# run's without it bit for bit (both grad modes, f64 and f32, an sft step, two prompts per step); the recorded
# cosine and norms equal numpy's on a detached and a full run's gradient dumps of the same step; schemas, the audit
# unchanged; bad values and the combinations it refuses exit 2 (under mpirun too, when there is MPI).  Every
# registered family (LS_FAMILIES; its tiny config from the registry).
foreach(fam ${LS_FAMILIES})
  if(MPIEXEC_EXECUTABLE)
    add_test(NAME grad_cosine_${fam}
             COMMAND ${CMAKE_COMMAND} -E env "MPIEXEC=${MPIEXEC_EXECUTABLE}" "MPIRUN_FLAGS=${LS_MPIRUN_FLAGS_STR}"
                     ${CMAKE_SOURCE_DIR}/tests/trainer/grad_cosine.sh ${CMAKE_BINARY_DIR}
                     ${fam})
    set_tests_properties(grad_cosine_${fam} PROPERTIES TIMEOUT 600 ENVIRONMENT "${LS_MPI_TEST_ENV}")
  else()
    add_test(NAME grad_cosine_${fam}
             COMMAND ${CMAKE_SOURCE_DIR}/tests/trainer/grad_cosine.sh ${CMAKE_BINARY_DIR}
                     ${fam})
    set_tests_properties(grad_cosine_${fam} PROPERTIES TIMEOUT 600)
  endif()
endforeach()
