# The mla family's sources (registered by its line in trainer/families/families.list):
# LS_FAMILY_CORE_SRC the dtype-independent ones (its descriptor), LS_FAMILY_NUMERIC_SRC those
# compiled once per real type (paths relative to trainer/); LS_FAMILY_PROFILE its audit profile (relative to the
# source tree; its descriptor names the same file), whose digest runs are pinned to.
list(APPEND LS_FAMILY_CORE_SRC families/mla/mla_desc.c)
list(APPEND LS_FAMILY_NUMERIC_SRC families/mla/mla_table.c families/mla/mla_forward.c families/mla/mla_layer.c
  families/mla/mla_segment.c families/mla/mla_cp_attn.c families/mla/mla_cp.c)
set(LS_FAMILY_PROFILE profiles/mla.json)
