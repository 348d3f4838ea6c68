/* train_main.c - longstraw-train: parse the command line, run in the chosen
 * dtype.  Everything else lives in the trainer library. */
#include <locale.h>
#include <stdio.h>

#include "trainer/train_run.h"

int main(int argc, char **argv) {
    setlocale(LC_ALL, "C");
    ls_train_args a;
    char err[1024];
    if (ls_train_args_parse(&a, argc, argv, err, sizeof err) != 0) {
        fprintf(stderr, "longstraw-train: %s\n", err);
        fprintf(stderr, "usage: longstraw-train --config FILE --out RUN [options]; see --help\n");
        return 2;
    }
    if (a.help) {
        ls_train_usage(stdout);
        return 0;
    }
    return a.f64 ? ls_train_run_f64(&a) : ls_train_run_f32(&a);
}
