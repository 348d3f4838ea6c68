/* dense_config.h - the dense family's descriptor (family_desc.h).  Its config
 * keys are the hybrid family's attention keys (attn_heads, attn_kv_heads,
 * head_dim, rope_dim: the same entries of ls_hybrid_key_table) in an
 * ls_hybrid_keys block whose GDN keys stay 0, so that the hybrid code reads
 * them with ls_hybrid_keys_of (trainer/families/hybrid/hybrid_config.h).
 * dtype-independent. */
#ifndef LS_TRAINER_DENSE_CONFIG_H
#define LS_TRAINER_DENSE_CONFIG_H
#include "trainer/families/hybrid/hybrid_config.h"

extern const ls_family_desc ls_family_desc_dense;
#endif
