# Expert parallelism of longstraw-train (--ep N, trainer/dist/ep.h): EP-2,
# EP-4 and CP-2 x EP-2 against EP-1, dumped gradients and checkpoints
# compared tensor by tensor (bitwise at one CP size), the ep-drop-dx fault
# detected, the grid recorded (tests/trainer/ep_train.sh); the usage refusals.
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  add_test(NAME ep_train
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/trainer/ep_train.sh $<TARGET_FILE:longstraw-train> ${MPIEXEC_EXECUTABLE}
                   "${LS_MPIRUN_FLAGS_STR}" ${CMAKE_SOURCE_DIR} $<TARGET_FILE:longstraw-plan>)
  set_tests_properties(ep_train PROPERTIES TIMEOUT 300 ENVIRONMENT "${LS_MPI_TEST_ENV}")
  # the audit of EP runs (tests/trainer/ep_audit.sh): signed CP-1 x EP-2 and CP-2 x EP-2, detached and full, at level 1
  # with every rule an EP-1 run passes and the grid named; copies without moe_dx / ep_grad_gather /
  # ep_param_gather refused by the profile's rule; an EP group disagreeing on its shard refused
  add_test(NAME ep_audit
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/trainer/ep_audit.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}
                   ${MPIEXEC_EXECUTABLE} "${LS_MPIRUN_FLAGS_STR}")
  set_tests_properties(ep_audit PROPERTIES TIMEOUT 300 ENVIRONMENT "${LS_MPI_TEST_ENV}")
  # parity covers EP (tests/trainer/ep_parity.sh): --like a signed CP-1 x EP-2 run runs the matrix and the run's path at
  # EP-2 too (every EP check passes, EP-1 bit for bit; ep-drop-dx detected; coverage eps [1, 2]) and the audit
  # certifies the run at level 4; against a report --like an EP-1 run level 1, parity.coverage naming ep;
  # ep-drop-dx put into the EP path runs fails the report; --eps refusals.  About 35 s on 2 cores (three
  # parity --like runs: slow under the sanitizers, as replay_checkpoint's two)
  add_test(NAME ep_parity COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/trainer/ep_parity.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(ep_parity PROPERTIES TIMEOUT 600 LABELS "parity;slow"
                       ENVIRONMENT "OMP_NUM_THREADS=1;${LS_MPI_TEST_ENV}")
  # --ep that does not divide the world: exit 2 naming --ep
  add_test(NAME ep_refused_world
           COMMAND sh -c "\"$0\" \"$@\" 2>&1 | grep -q -- '--ep 4: does not divide the world'" ${MPIEXEC_EXECUTABLE}
                   ${LS_MPIRUN_FLAGS} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:longstraw-train>
                   --config ${CMAKE_SOURCE_DIR}/configs/mla-tiny.json --prompt-len 64 --out ${CMAKE_CURRENT_BINARY_DIR}/ep_refused --ep 4)
  set_tests_properties(ep_refused_world PROPERTIES TIMEOUT 60 ENVIRONMENT "${LS_MPI_TEST_ENV}")
endif()
# the hybrid family has no experts; 3 does not divide mla-tiny's 8 experts: exit 2 naming --ep
add_test(NAME ep_refused_hybrid
         COMMAND sh -c "\"$0\" \"$@\" 2>err.txt; test $? -eq 2 && grep -q -- '--ep: ' err.txt" $<TARGET_FILE:longstraw-train>
                 --config ${CMAKE_SOURCE_DIR}/configs/hybrid-tiny.json --prompt-len 64 --out ep_h --ep 2)
add_test(NAME ep_refused_experts
         COMMAND sh -c "\"$0\" \"$@\" 2>err3.txt; test $? -eq 2 && grep -q -- '--ep 3: does not divide the 8 routed experts' err3.txt" $<TARGET_FILE:longstraw-train>
                 --config ${CMAKE_SOURCE_DIR}/configs/mla-tiny.json --prompt-len 64 --out ep_e --ep 3)
set_tests_properties(ep_refused_hybrid ep_refused_experts PROPERTIES TIMEOUT 60
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
# longstraw-plan --ep: one EP rank's plan; 3 does not divide mla-tiny's 8 experts, hybrid has none: exit 2 naming --ep
add_test(NAME ep_plan_refused
         COMMAND sh -c "\"$0\" --config $1/configs/mla-tiny.json --prompt-len 64 --ep 3 2>e1.txt; test $? -eq 2 && grep -q -- '--ep 3: does not divide the model.s 8 routed experts' e1.txt && \"$0\" --config $1/configs/hybrid-tiny.json --prompt-len 64 --ep 2 2>e2.txt; test $? -eq 2 && grep -q -- '--ep 2: family .hybrid. has no routed experts' e2.txt"
                 $<TARGET_FILE:longstraw-plan> ${CMAKE_SOURCE_DIR})
set_tests_properties(ep_plan_refused PROPERTIES TIMEOUT 60 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
