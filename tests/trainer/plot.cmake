# longstraw-plot: metrics JSONL to SVG (hand-computed coordinates, bad inputs, well-formed output).
ls_add_criterion_test(test_plot SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/trainer/test_plot.c LIBS ls_trainer_core TIMEOUT 120)
add_dependencies(test_plot longstraw-plot)
