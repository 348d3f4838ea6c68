/* run_dir.h - a run directory is created empty or refused: a run never
 * overwrites another.  dtype-independent. */
#ifndef LS_TRAINER_RUN_DIR_H
#define LS_TRAINER_RUN_DIR_H
#include <stddef.h>

/* Create out (or accept it when it exists and is empty).  0, or -1 with
 * err naming --out and the reason.  (Rank 0 of a run does this.) */
int ls_run_dir_prepare(const char *out, char *err, size_t err_len);
/* Create out/rank-NNNN for rank.  0, or -1 with err. */
int ls_run_dir_make_rank(const char *out, unsigned rank, char *err, size_t err_len);
#endif
