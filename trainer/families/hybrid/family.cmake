# The hybrid family's sources (registered by its line in trainer/families/families.list):
# LS_FAMILY_CORE_SRC the dtype-independent ones (its descriptor), LS_FAMILY_NUMERIC_SRC those
# compiled once per real type (paths relative to trainer/); LS_FAMILY_PROFILE its audit profile (relative to the
# source tree; its descriptor names the same file), whose digest runs are pinned to.
list(APPEND LS_FAMILY_CORE_SRC families/hybrid/hybrid_desc.c)
list(APPEND LS_FAMILY_NUMERIC_SRC families/hybrid/hybrid_table.c families/hybrid/hybrid_state.c
  families/hybrid/hybrid_layer.c families/hybrid/hybrid_segment.c families/hybrid/hybrid_cp.c)
set(LS_FAMILY_PROFILE profiles/hybrid.json)
