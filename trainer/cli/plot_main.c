/* plot_main.c - longstraw-plot: metrics JSONL to an SVG line chart.  The
 * work is in trainer/metrics_plot.c. */
#include <locale.h>
#include <stdio.h>

#include "trainer/run/metrics_plot.h"

int main(int argc, char **argv) {
    setlocale(LC_ALL, "C");
    ls_plot_args a;
    char err[1024] = "";
    if (ls_plot_args_parse(&a, argc, argv, err, sizeof err) != 0) {
        fprintf(stderr, "longstraw-plot: %s\n", err);
        fprintf(stderr, "usage: longstraw-plot --metrics FILE --out FILE.svg --series A,B [options]; see --help\n");
        return 2;
    }
    if (a.help) {
        ls_plot_usage(stdout);
        return 0;
    }
    int rc = ls_plot_run(&a, err, sizeof err);
    if (rc != 0) fprintf(stderr, "longstraw-plot: %s\n", err);
    return rc;
}
