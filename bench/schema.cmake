# bench_schema: JSON Schema validation per document, the compiled validator
# against the reference it replaced (tests/receipts/schema_ref.c).
add_executable(bench_schema ${CMAKE_CURRENT_LIST_DIR}/bench_schema.c ${CMAKE_SOURCE_DIR}/tests/receipts/schema_ref.c)
target_include_directories(bench_schema PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(bench_schema PRIVATE ls_receipts)
