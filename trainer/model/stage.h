/* stage.h - reading a host-tier state through the device tier
 * (--state-tier host, docs/design.md §3).  Numeric (LS_K names).
 *
 * A state whose rows live in the host tier (ls_state_in_host: captured
 * under LS_MEM_PROMPT_STATE_HOST, or a fork borrowing such a state's pages)
 * is never read in place: before layer l runs, the reader stages layer l's
 * share (every page's k, v and x rows and the fixed buffers) into one
 * LS_MEM_STAGING buffer, allocated in the device tier's memory space
 * (trainer/base/mem_tracker.h: ls_mem_tier_space; host on this CPU build, the
 * device's memory once a GPU backend sets it, the page tables staying host
 * memory), through trainer/base/tier.h, and hands the layer a
 * view (ls_stager_state) whose layer l points into that buffer.  Double
 * buffered: acquiring layer l waits for its copy and begins the copy of the
 * layer `next` the reader will use after it, so the next layer's copy runs
 * while l computes; at most two layers' shares are staged at a time.
 *
 * The view holds only what is staged: its other layers have no pages and
 * no fixed buffers (their CP context is kept), so a read of a layer that was
 * not acquired finds nothing rather than the host rows.  Staging copies; a
 * layer reads bit for bit what it would read from the state itself.
 *
 * A state in the device tier (or NULL) is handed through unchanged:
 * ls_stager_state returns it and acquire/release do nothing, so the device
 * tier's runs execute exactly as before.
 *
 * The state read must not change while staged, but for the pages a
 * segment appends to it (capture's state_out is its context): those are
 * appended to layers after they are released. */
#ifndef LS_TRAINER_STAGE_H
#define LS_TRAINER_STAGE_H
#include "trainer/base/tier.h"
#include "trainer/model/state.h"

typedef struct {
    int l;              /* the layer staged in this slot; -1: free */
    void *buf;          /* LS_MEM_STAGING: the layer's rows and fixed buffers */
    ls_kv_page *pages;  /* the staged pages (LS_MEM_SCRATCH metadata) */
    ls_layer_state ly;  /* the staged layer */
    ls_tier_handle h;   /* its last copy */
} ls_stage_slot;

typedef struct {
    const ls_state *src; /* the state read */
    int staging;         /* src is in the host tier */
    ls_state view;       /* staging: src's header over an ly of staged layers */
    ls_stage_slot slot[2];
} ls_stager;

/* 1 when s's rows are read through the staging tier. */
int LS_K(ls_state_in_host)(const ls_state *s);

/* A stager over s (NULL or device tier: a pass-through).  LS_ERR_NOMEM:
 * nothing to free.  Released with ls_stager_free. */
ls_status LS_K(ls_stager_init)(ls_stager *sg, const ls_state *s);

/* The state a reader hands its layers: the view, or src unchanged. */
static inline const ls_state *LS_K(ls_stager_state)(const ls_stager *sg) {
    return sg->staging ? &sg->view : sg->src;
}

/* Layer l staged and in the view (waits for its copy; begins it first
 * when not yet begun), and the copy of layer `next` begun (-1: none). */
ls_status LS_K(ls_stager_acquire)(ls_stager *sg, int l, int next);

/* Layer l's staged share released (the view's layer l empty again). */
void LS_K(ls_stager_release)(ls_stager *sg, int l);

/* Every copy finished, every staged share and the view released. */
void LS_K(ls_stager_free)(ls_stager *sg);
/* The fault stage-skip-page (the trainer's --fault, recorded in the run): 1 makes every staging leave each
 * layer's last page unstaged; 0 (the default) stages everything. */
void LS_K(ls_stage_set_fault_skip_page)(int on);
#endif
