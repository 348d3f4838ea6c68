# The dense family's sources (registered by its line in trainer/families/families.list):
# LS_FAMILY_CORE_SRC the dtype-independent ones (its descriptor), LS_FAMILY_NUMERIC_SRC those
# compiled once per real type.  Paths relative to trainer/.  Its audit profile lives here too
# (LS_FAMILY_PROFILE_<name>: pinned at build time like profiles/<name>.json).
list(APPEND LS_FAMILY_CORE_SRC families/dense/dense_desc.c)
list(APPEND LS_FAMILY_NUMERIC_SRC families/dense/dense_table.c)
set(LS_FAMILY_PROFILE_dense ${CMAKE_CURRENT_LIST_DIR}/dense.json)
