/* rule_ids.c - the one list of the audit's rule ids (audit.h): every rule
 * ls_audit_rule_add appends must be named here, with the level the
 * docs/audit.md table puts it at (a profile may move a collective rule or
 * run.faults to another level; the id stays).  longstraw-audit --list-names
 * prints the list, and tests/tools/check_vocab.py holds it against
 * schemas/audit-report.schema.json and docs/audit.md. */
#include "audit/model/audit.h"
#include "audit/rules/rules.h"

#include <string.h>

static const struct {
    const char *id;
    int level;
} RULE_IDS[] = {
    /* level 1: execution capacity */
    {"profile.match", 1}, {"sources.agree", 1}, {"run.faults", 1}, {"manifest.valid", 1},
    {"manifest.digests", 1}, {"manifest.signature", 1}, {"receipts.valid", 1}, {"receipts.agree", 1},
    {"build.digest_equal", 1}, {"trace.valid", 1}, {"rank.phases", 1}, {"rank.layers", 1},
    {"rank.optimizer", 1}, {"steps.sequence", 1}, {"rank.complete", 1}, {"rank.no_error", 1},
    {"memory.accounting", 1}, {"steps.prefix_frozen", 1}, {"collectives.match", 1},
    {"collectives.performed", 1}, {"collectives.p2p", 1},
    /* level 2: response-operator fidelity */
    {"steps.exact", 2}, {"run.invariants", 2}, {"collectives.composition", 2}, {"parity.build", 2},
    {"parity.signature", 2}, {"parity.coverage", 2}, {"parity.controls", 2}, {"parity.decisions", 2},
    {"parity.logprob", 2}, {"parity.forward", 2},
    /* level 3: distributed-update consistency */
    {"collectives.dkv", 3}, {"collectives.finalize", 3}, {"digests.replicated", 3}, {"digests.receipts", 3},
    {"parity.cp_grad", 3}, {"parity.cp_params", 3}, {"parity.dp_grad", 3},
    /* level 4: full-gradient parity */
    {"config.full_mode", 4}, {"run.probe", 4}, {"parity.grad", 4}, {"parity.fd_grad", 4}, {"parity.loss", 4},
};
#define N_RULE_IDS (sizeof RULE_IDS / sizeof RULE_IDS[0])

size_t ls_audit_rule_id_count(void) { return N_RULE_IDS; }

const char *ls_audit_rule_id_at(size_t i, int *level) {
    if (i >= N_RULE_IDS) return NULL;
    if (level) *level = RULE_IDS[i].level;
    return RULE_IDS[i].id;
}

int ls_audit_rule_id_level(const char *id) {
    for (size_t i = 0; id && i < N_RULE_IDS; i++)
        if (!strcmp(RULE_IDS[i].id, id)) return RULE_IDS[i].level;
    return 0;
}
