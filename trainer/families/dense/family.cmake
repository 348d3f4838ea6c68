# The dense family's sources (registered by its line in trainer/families/families.list):
# LS_FAMILY_CORE_SRC the dtype-independent ones (its descriptor), LS_FAMILY_NUMERIC_SRC those
# compiled once per real type (paths relative to trainer/); LS_FAMILY_PROFILE its audit profile (relative to the
# source tree; its descriptor names the same file), kept in this folder, whose digest runs are pinned to.
list(APPEND LS_FAMILY_CORE_SRC families/dense/dense_desc.c)
list(APPEND LS_FAMILY_NUMERIC_SRC families/dense/dense_table.c)
set(LS_FAMILY_PROFILE trainer/families/dense/dense.json)
