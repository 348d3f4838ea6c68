/* train_names.h - the trainer's vocabulary as one JSON document
 * (longstraw-train --list-names): the model families, the layer kinds of
 * the trace's layer_end events, the communicator's backends and group
 * kinds, the faults it injects and the values of its fixed-choice options.
 * tests/tools/check_vocab.py holds it against the schemas and the docs. */
#ifndef LS_TRAIN_NAMES_H
#define LS_TRAIN_NAMES_H

#include <cjson/cJSON.h>

/* The document; the caller's (cJSON_Delete).  NULL when out of memory. */
cJSON *ls_train_names_json(void);

#endif
