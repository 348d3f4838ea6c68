# Multi-rank programs (ls_add_mpi_program_test, tests/CMakeLists.txt), float64.

# Context parallelism of the hybrid family (trainer/dist/cp.h): a plain-main
# program like test_comm, alone (single backend: the CP-1 path) and under
# mpirun with 1, 2 and 4 ranks.
ls_add_mpi_program_test(test_cp RANKS 1 2 4 DEFS LS_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                        TIMEOUT 300 MPI_TIMEOUT 600)

# The mla family's cross-rank attention (trainer/families/mla/mla_cp_attn.h): the global DSA
# selection and the MAX/SUM composition against one process over all rows;
# alone (CP-1) and under mpirun with 2, 3 and 4 ranks.
ls_add_mpi_program_test(test_mla_cp RANKS 2 3 4 TIMEOUT 120 MPI_TIMEOUT 300)

# The mla family's training step under context parallelism (trainer/families/mla/mla_cp.c):
# CP-N = CP-1 and = the naive gradient, the faults detected; alone and under
# mpirun with 1, 2 and 4 ranks.
ls_add_mpi_program_test(test_mla_cp_train RANKS 1 2 4 DEFS LS_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                        TIMEOUT 300 MPI_TIMEOUT 600)
