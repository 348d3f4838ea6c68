/* step_options.c - defaults of the step options (dtype-independent). */
#include "trainer/step/step.h"

#include <string.h>

void ls_step_options_defaults(ls_step_options *o) {
    memset(o, 0, sizeof *o); /* no CP group, no faults */
    o->strategy = LS_STRATEGY_LONGSTRAW;
    o->objective = LS_OBJECTIVE_GRPO;
    o->page_size = 64;
    o->capture_chunk = 2048;
    o->G = 4;
    o->R = 8;
    o->top_p = 0.95;
    o->seed = 1;
    o->lr = 1e-3;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->adam_eps = 1e-8;
    o->weight_decay = 0.0;
    o->fault_nan_grad = 0;
    o->fault_untracked_alloc = 0;
    o->keep_reference = -1;
    o->replay_checkpoint = -1;
    o->replay_chunk = 256;
}
