# --prompts-per-step B (tests/trainer/prompts_per_step.sh): B = 2 gradients are the mean of two single-group steps'
# (both grad modes), --rollouts reads B lines a step, bad values exit 2, the per-step memory peak is flat in
# B; under mpirun (when there is MPI) also at CP-2, and CP-2 B = 2 equals one rank's B = 2.  Both families.
foreach(fam hybrid mla)
  if(MPIEXEC_EXECUTABLE)
    add_test(NAME prompts_per_step_${fam}
             COMMAND ${CMAKE_COMMAND} -E env "MPIEXEC=${MPIEXEC_EXECUTABLE}" "MPIRUN_FLAGS=${LS_MPIRUN_FLAGS_STR}"
                     ${CMAKE_SOURCE_DIR}/tests/trainer/prompts_per_step.sh ${CMAKE_BINARY_DIR}
                     ${CMAKE_SOURCE_DIR}/configs/${fam}-tiny.json)
    set_tests_properties(prompts_per_step_${fam} PROPERTIES TIMEOUT 600 ENVIRONMENT "${LS_MPI_TEST_ENV}")
  else()
    add_test(NAME prompts_per_step_${fam}
             COMMAND ${CMAKE_SOURCE_DIR}/tests/trainer/prompts_per_step.sh ${CMAKE_BINARY_DIR}
                     ${CMAKE_SOURCE_DIR}/configs/${fam}-tiny.json)
    set_tests_properties(prompts_per_step_${fam} PROPERTIES TIMEOUT 600)
  endif()
endforeach()
