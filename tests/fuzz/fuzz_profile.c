/* fuzz_profile.c - libFuzzer target for the profile loader the audit runs
 * on every profile it reads (audit/model/profile.h): arbitrary bytes through
 * ls_audit_profile_parse (strict JSON, schemas/profile.schema.json, the
 * loader's own checks).  An accepted profile must keep every cap and every
 * promise of profile.h: its strings NUL-terminated inside their fields, the
 * counts within the caps, every phase and layer kind a step or requirement
 * names declared, the step grammar's phases declared (every phase of the
 * plan among them, its repeated items one block), the per-step purposes'
 * bits within the 8 of ls_audit_step.step_req, fault levels 1..4, the digest 64 hex digits of
 * the bytes; a refused one leaves an error naming the input.  Traps
 * otherwise. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "audit/model/profile.h"
#include "receipts/format/digest.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int terminated(const char *s, size_t cap) { return memchr(s, 0, cap) != NULL; }

static int declared(const char (*tab)[LS_AUDIT_PROFILE_IDENT], size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(tab[i], name) == 0) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ls_audit_profile p;
    char err[512] = "";
    ls_status st = ls_audit_profile_parse((const char *)data, size, "fuzz", NULL, &p, err, sizeof err);
    if (st != LS_OK) {
        CHECK(strncmp(err, "fuzz", 4) == 0);
        return 0;
    }
    char hex[LS_DIGEST_HEX_SIZE];
    CHECK(ls_digest_sha256_hex(data, size, hex) == LS_OK && strcmp(hex, ls_audit_profile_sha256(&p)) == 0);
    CHECK(terminated(p.name, sizeof p.name) && ls_audit_profile_name_ok(p.name) && terminated(p.trainer, sizeof p.trainer));
    CHECK(p.n_phases >= 1 && p.n_phases <= LS_AUDIT_PROFILE_MAX_NAMES);
    CHECK(p.n_layer_kinds >= 1 && p.n_layer_kinds <= LS_AUDIT_PROFILE_MAX_NAMES);
    CHECK(p.n_steps >= 1 && p.n_steps == ls_audit_profile_n_steps(&p) && p.n_steps <= LS_AUDIT_PROFILE_MAX_STEPS);
    for (size_t i = 0; i < p.n_steps; i++) {
        const ls_audit_profile_step *s = ls_audit_profile_step_at(&p, i);
        CHECK(declared((const char(*)[LS_AUDIT_PROFILE_IDENT])p.phases, p.n_phases, s->phase));
        CHECK((s->unit == LS_AUDIT_UNIT_NONE) == (s->dirs == 0 && s->layers == 0));
        CHECK(s->unit == LS_AUDIT_UNIT_NONE || !(s->when & LS_AUDIT_WHEN_RAN));
        CHECK(s->unit != LS_AUDIT_UNIT_NONE || s->passes == LS_AUDIT_PASSES_ONCE);
        CHECK(!(s->when & LS_AUDIT_WHEN_PROBED));
    }
    /* the step grammar: declared phases, every plan phase in it, no ran, one repeated block */
    CHECK(p.n_seq >= 1 && p.n_seq == ls_audit_profile_n_seq(&p) && p.n_seq <= LS_AUDIT_PROFILE_MAX_SEQ);
    CHECK(p.seq_block0 <= p.seq_block1 && p.seq_block1 <= p.n_seq);
    for (size_t i = 0; i < p.n_seq; i++) {
        const ls_audit_profile_seq_item *it = ls_audit_profile_seq_at(&p, i);
        CHECK(declared((const char(*)[LS_AUDIT_PROFILE_IDENT])p.phases, p.n_phases, it->phase));
        CHECK(!(it->when & LS_AUDIT_WHEN_RAN) && it->n_paths <= LS_AUDIT_PROFILE_MAX_SEQ_PATHS);
        CHECK(it->repeat == (i >= p.seq_block0 && i < p.seq_block1));
        for (size_t k = 0; k < it->n_paths; k++) CHECK(it->paths[k].values != 0);
    }
    for (size_t i = 0; i < p.n_steps; i++) {
        int in = 0;
        for (size_t k = 0; k < p.n_seq; k++) in |= strcmp(p.seq[k].phase, p.steps[i].phase) == 0;
        CHECK(in);
    }
    unsigned bits = 0;
    for (int id = 0; id < LS_AUDIT_PROFILE_NRULES; id++) {
        const ls_audit_profile_rule *r = ls_audit_profile_rule_of(&p, (ls_audit_profile_rule_id)id);
        if (r == NULL) continue;
        CHECK(r->level >= 1 && r->level <= 4 && terminated(r->title, sizeof r->title) && terminated(r->none, sizeof r->none));
        CHECK(r->n_layers <= LS_AUDIT_PROFILE_MAX_LAYER_REQ && r->n_steps <= LS_AUDIT_PROFILE_MAX_STEP_REQ);
        for (size_t k = 0; k < r->n_layers; k++) {
            const ls_audit_profile_layer_req *q = &r->layers[k];
            CHECK(q->n_kinds >= 1 && q->n_kinds <= LS_AUDIT_PROFILE_MAX_LIST && q->n_phases >= 1 &&
                  q->n_phases <= LS_AUDIT_PROFILE_MAX_LIST && q->n_purposes >= 1 &&
                  q->n_purposes <= LS_AUDIT_PROFILE_MAX_LIST);
            for (size_t j = 0; j < q->n_kinds; j++)
                CHECK(declared((const char(*)[LS_AUDIT_PROFILE_IDENT])p.layer_kinds, p.n_layer_kinds, q->kinds[j]));
            for (size_t j = 0; j < q->n_phases; j++)
                CHECK(declared((const char(*)[LS_AUDIT_PROFILE_IDENT])p.phases, p.n_phases, q->phases[j]));
            CHECK(!q->must_appear || r->none[0]);
            CHECK(q->group_kind >= 0 && q->group_kind < LS_AUDIT_GROUP_KIND_COUNT);
        }
        for (size_t k = 0; k < r->n_steps; k++) {
            const ls_audit_profile_step_req *q = &r->steps[k];
            CHECK(declared((const char(*)[LS_AUDIT_PROFILE_IDENT])p.phases, p.n_phases, q->phase));
            CHECK(q->bit0 == bits && q->n_purposes >= 1);
            bits += (unsigned)q->n_purposes;
        }
    }
    CHECK(bits == p.n_step_purposes && bits <= LS_AUDIT_PROFILE_MAX_STEP_PURPOSES);
    CHECK(p.n_faults <= LS_AUDIT_PROFILE_MAX_FAULTS && p.n_controls <= LS_AUDIT_PROFILE_MAX_CONTROLS);
    for (size_t i = 0; i < p.n_faults; i++) {
        const char *what = NULL;
        CHECK(terminated(p.faults[i].name, sizeof p.faults[i].name));
        CHECK(ls_audit_profile_fault_level(&p, p.faults[i].name, &what) >= 1 && what != NULL);
    }
    for (size_t i = 0; i < ls_audit_profile_n_controls(&p); i++)
        CHECK(terminated(ls_audit_profile_control_at(&p, i)->breaks, LS_AUDIT_PROFILE_IDENT));
    return 0;
}
