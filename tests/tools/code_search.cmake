# Code search sees the LS_K definitions (tests/tools/code_search.sh): the ctags and cscope indexes of a clean
# copy of the tree (scripts/code_index.sh, .ctags.d/longstraw.ctags) find a kernel by its float32,
# float64 and LS_K names; without the configuration the same look-ups fail.  Skipped (77) without
# universal-ctags or cscope.  About 10 s.
add_test(NAME code_search
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/code_search.sh ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/code-search)
set_tests_properties(code_search PROPERTIES TIMEOUT 300 LABELS tools SKIP_RETURN_CODE 77)
