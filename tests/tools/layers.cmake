# The source tree's layering (tests/tools/check_layers.py): every include runs the
# way the folders' READMEs state ('May include:'), no circle between folders
# or between the units of a folder, no two headers with one basename, no
# reference to design documents outside the repository.  The self-test
# injects each violation into a small tree of its own and sees it reported.
find_program(LS_PYTHON3_LAYERS NAMES python3 HINTS /usr/bin)
if(NOT LS_PYTHON3_LAYERS)
  set(LS_PYTHON3_LAYERS python3)
endif()
add_test(NAME check_layers COMMAND ${LS_PYTHON3_LAYERS} ${CMAKE_SOURCE_DIR}/tests/tools/check_layers.py ${CMAKE_SOURCE_DIR})
add_test(NAME check_layers_selftest COMMAND ${LS_PYTHON3_LAYERS} ${CMAKE_SOURCE_DIR}/tests/tools/check_layers.py --selftest)
# The schemas' family parts (the config's "family" enum, each family's oneOf branch with its keys)
# against the registry of model families the build's trainer wrote (generated/families.json).
add_test(NAME family_schemas COMMAND ${LS_PYTHON3_LAYERS} ${CMAKE_SOURCE_DIR}/tests/tools/family_schemas_check.py
         ${CMAKE_BINARY_DIR}/generated/families.json ${CMAKE_SOURCE_DIR}/schemas)
add_test(NAME family_schemas_selftest COMMAND ${LS_PYTHON3_LAYERS} ${CMAKE_SOURCE_DIR}/tests/tools/family_schemas_check.py
         --selftest ${CMAKE_BINARY_DIR}/generated/families.json ${CMAKE_SOURCE_DIR}/schemas)
