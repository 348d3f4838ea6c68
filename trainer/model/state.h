/* state.h - the carried state: one container every family fills with its
 * own rows (what a segment hands the next one: the keys of the positions
 * before it, and the fixed-size state of recurrent layers).  Numeric
 * (compiled per real type, LS_K names).
 *
 * Per layer: pages of per-position rows (a page is a run of n consecutive
 * positions from pos0, each row kind token-major) and two fixed buffers
 * independent of the position count.  What each slot holds per family
 * (a slot a layer does not use is NULL):
 *
 *   slot           hybrid attention layer   hybrid GDN layer           mla layer
 *   page .k        K [n, Hkv, hd]           -                          c_kv after its norm [n, kv_rank]
 *   page .v        V [n, Hkv, hd]           -                          k_pe after RoPE [n, d_rope]
 *   page .x        -                        -                          indexer keys [n, index_dim]
 *                                                                      (NULL in a gradient)
 *   .fixed0        -                        conv tail [K-1, C]         -
 *   .fixed1        -                        recurrent state S          -
 *                                           [Hv, dk, dv]
 *   .cp            ls_cp_attn               -                          ls_mla_cp_layer
 *
 * (hybrid C = 2 Hk dk + Hv dv; .cp: the layer's context on other ranks, NULL
 * without context parallelism.)  A gradient state (the family's
 * state_grad_like) has the same slots, shapes and pages, zeroed.
 *
 * Ownership: pages [0, n_borrowed) of every layer belong to another state
 * (a fork, e.g. a member's decode state, borrows the prompt's pages); the
 * rest, their rows and the fixed buffers are owned and tracked under cat,
 * and released by the family's state_free (ls_state_free, family.h), which
 * leaves the state empty.  ly and the page arrays are metadata under
 * LS_MEM_SCRATCH. */
#ifndef LS_TRAINER_STATE_H
#define LS_TRAINER_STATE_H
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/decisions.h"
#include "kernels/real.h"
#include "trainer/base/mem_tracker.h"

typedef struct {
    ls_real *k, *v, *x; /* the page's rows (the table above) */
    size_t n;
    int64_t pos0;
    /* the discrete decisions (kernels/decisions.h) of the layer forward that wrote this page, on the
     * first page of its chunk (dec_set); a `full` backward that recomputes the chunk must decide alike */
    ls_decisions dec;
    int dec_set;
} ls_kv_page;

typedef struct {
    ls_kv_page *pages;
    const void *cp; /* the family's context on other ranks (NULL: none; the table above) */
    size_t n_pages, cap_pages;
    ls_real *fixed0; /* fixed buffer 0 (the table above) */
    ls_real *fixed1; /* fixed buffer 1 */
} ls_layer_state;

struct ls_family_ops;
/* fam: the family that built the state (NULL: empty, zero-initialised). */
typedef struct ls_state_s {
    const struct ls_family_ops *fam;
    int n_layers;
    ls_layer_state *ly; /* [n_layers] */
    int64_t n_pos;
    size_t page_size;
    size_t n_borrowed;
    ls_mem_cat cat;
    /* a fork of a host-tier state (cat LS_MEM_PROMPT_STATE_HOST): it borrows host rows, so its readers stage
       it too (stage.h) */
    int host_rows;
    /* CP: the state this rank's shard of the prompt began from (hybrid: the GDN states received from rank
     * r-1), owned and freed with this state; NULL: none (one rank, a family with no chain, a fork or a
     * gradient).  It belongs to the capture that wrote this state: a later capture (the reference's beside
     * the policy's) has its own, so the prompt backward differentiates the capture it is given. */
    struct ls_state_s *cp_start;
} ls_state;

/* Appends layer l's pages for T new positions from pos0 (page_size rows a
 * page, the last one shorter): a page's k, v and x hold rows [rows[j]]
 * copied from src[j] (src[j] NULL: that field stays NULL), allocated to
 * size under the state's category and owned by s.  LS_ERR_NOMEM leaves the
 * pages so far. */
ls_status LS_K(ls_state_append_pages)(ls_state *s, int l, const ls_real *const src[3], const size_t rows[3],
                                      size_t T, int64_t pos0);

/* The discrete decisions of the layer forward that wrote the chunk starting
 * at pos0 of layer l: recorded on the chunk's first page; checked against a
 * recompute's (LS_ERR_INTERNAL, with a line on stderr naming the layer,
 * position and both ledgers, when they differ; LS_OK when the chunk has
 * none recorded). */
void LS_K(ls_state_note_decisions)(ls_layer_state *s, int64_t pos0, const ls_decisions *d);
ls_status LS_K(ls_state_check_decisions)(const ls_layer_state *s, int l, int64_t pos0, const ls_decisions *d);

/* d (overwritten) as s's shape in category cat: the same layers, positions
 * and page size, each layer's CP context, and its pages borrowed (borrow:
 * a fork, n_borrowed set) or owned (k and v of the same sizes, copied
 * unless zero; x copied too, or NULL when zero: no gradient flows into the
 * indexer).  The family adds what else its layers carry (the fixed
 * buffers).  d is the caller's, released with the family's state_free; on
 * failure d holds what was made so far: free it the same way. */
ls_status LS_K(ls_state_derive)(ls_state *d, const ls_state *s, ls_mem_cat cat, int borrow, int zero);
#endif
