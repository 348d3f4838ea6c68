/* html.h - longstraw-audit --html: one self-contained HTML page of a run.
 *
 * The page needs nothing else: no script (a Content-Security-Policy meta
 * forbids any), no external resource, styles inline.  It shows
 *  - the verdict (section id="verdict"): the report's "level" and, per
 *    level, its name and whether it holds; "no verdict" when the report is
 *    NULL or has no usable level;
 *  - the rule table (section id="rules"): every check of every level with
 *    PASS/FAIL, its message and its evidence (rank, file, seq; the first 50
 *    per check, then a count);
 *  - memory over time (section id="memory"): one inline <svg> per rank
 *    whose trace could be opened, plotting the live bytes of the total and
 *    of each category (at most 23 categories, the rest noted) from the
 *    rank's memory events against seconds since the rank's trace opened,
 *    and the events' own total_peak (the step's peak so far) as rising
 *    steps; a rank with neither memory events nor a receipt gets an <svg> saying
 *    so, a missing or refused trace a note and no <svg>.
 *    The samples are taken at phase boundaries and miss the peaks between
 *    them, so each plot also marks the byte-exact run peaks of the rank's
 *    receipt (rank-NNNN/receipt.json, read with ls_audit_read and checked
 *    by ls_receipt_parse; one naming another rank is refused): the tracked
 *    total's (run_total_peak_bytes) as a labelled line, "total peak 69.25
 *    MiB (receipt)", and each category's, every mark a
 *    <g class="peak[ total]" data-series=NAME data-bytes=EXACT> with the
 *    exact bytes in its <title>.  The y axis (the <svg>'s
 *    data-y-max-bytes; data-plot-top and data-plot-height give the plot's
 *    place) reaches the largest of the samples, the trace's peaks and the
 *    receipt's peaks, never less.  A caption says how the samples compare
 *    with the receipt's total peak ("Sampled at phase boundaries; the
 *    receipt's peak is X, the samples reach Y.").  Below the plot a table
 *    (class="peaks") gives the receipt's run and per-step peaks of the
 *    total, each category and the RSS, each cell <td data-bytes=EXACT>,
 *    beside what the samples reach.  A receipt that is absent, unreadable
 *    or refused is said so (with the reason) and nothing is marked: no
 *    figure is ever guessed.  Figures print as two decimals of the largest
 *    binary unit they reach ("69.25 MiB"), with the exact byte count.
 * The report follows schemas/audit-report.schema.json; members this module
 * does not know are ignored, members of the wrong type are skipped.
 *
 * Every string taken from the run or the report is HTML-escaped (& < > "
 * ' become entities, control characters and invalid UTF-8 become U+FFFD):
 * a hostile run cannot inject markup.  Memory is bounded per rank: a plot
 * keeps at most 1024 points per series, merging neighbours (their maxima)
 * as a trace grows; ranks are read one at a time.  The file is written with
 * ls_atomic_write (temporary file + rename). */
#ifndef LS_AUDIT_HTML_H
#define LS_AUDIT_HTML_H
#include <stddef.h>

#include <cjson/cJSON.h>

#include "audit/model/run_files.h"

/* Writes the page for run_dir and report (borrowed; may be NULL) to
 * out_path.  0 when written, 2 when run_dir is unusable (not a directory,
 * no rank) or out_path cannot be written, with the reason in err[err_len]
 * (err may be NULL).  Never reads outside run_dir; a missing or broken
 * receipt is a note on the page, not an error. */
int ls_audit_html_write(const char *run_dir, const cJSON *report, const char *out_path, char *err,
                        size_t err_len);
/* The same, every file it reads again (the manifest, each receipt, each
 * trace to its last byte) checked against reads, what the audit judged
 * (run_files.h, "one read"; NULL: not checked): other bytes and the page is
 * not written (2, err naming the file and both digests). */
int ls_audit_html_write_read(const char *run_dir, const cJSON *report, const ls_audit_reads *reads,
                             const char *out_path, char *err, size_t err_len);
#endif
