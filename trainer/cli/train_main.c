/* train_main.c - longstraw-train: parse the command line, run in the chosen
 * dtype.  Everything else lives in the trainer library. */
#include <locale.h>
#include <stdio.h>

#include "kernels/decisions.h"
#include "kernels/isa.h"
#include "trainer/dist/comm.h"
#include "trainer/model/family_desc.h"
#include "trainer/run/train_run.h"

int main(int argc, char **argv) {
    setlocale(LC_ALL, "C");
    ls_train_args a;
    char err[1024];
    ls_comm *comm = NULL; /* MPI when mpirun started this process (docs/design.md §4) */
    if (ls_comm_open(&comm, &argc, &argv, err, sizeof err) != LS_OK) {
        fprintf(stderr, "longstraw-train: %s\n", err);
        return 2;
    }
    int rank = ls_comm_rank(comm), rc;
    /* every rank parses the same command line and reaches the same verdict */
    if (ls_train_args_parse(&a, argc, argv, err, sizeof err) != 0) {
        if (rank == 0) {
            fprintf(stderr, "longstraw-train: %s\n", err);
            fprintf(stderr, "usage: longstraw-train --config FILE --out RUN [options]; see --help\n");
        }
        rc = 2;
    } else if (a.families) {
        /* the registry (trainer/model/family_desc.h), for parity, coverage, schema checks and docs */
        cJSON *reg = ls_family_registry_json();
        char *txt = reg ? cJSON_Print(reg) : NULL;
        if (txt && rank == 0) printf("%s\n", txt);
        rc = txt ? 0 : 1;
        if (!txt && rank == 0) fprintf(stderr, "longstraw-train: --families: out of memory\n");
        cJSON_free(txt);
        cJSON_Delete(reg);
    } else if (a.help) {
        if (rank == 0) ls_train_usage(stdout);
        rc = 0;
    } else if (ls_kernel_isa_init(err, sizeof err) != 0) {
        /* the kernels' ISA is recorded in the run's build object: made once, here */
        if (rank == 0) fprintf(stderr, "longstraw-train: %s\n", err);
        rc = 2;
    } else {
        a.comm = comm;
        /* every discrete decision of the run, in order (kernels/decisions.h; the summary prints it) */
        ls_decisions run_decisions = {0, 0};
        ls_decisions_use(&run_decisions);
        rc = a.f64 ? ls_train_run_f64(&a) : ls_train_run_f32(&a);
        ls_decisions_use(NULL);
    }
    ls_comm_close(comm);
    return rc;
}
