#include "common/status.h"

const char *ls_status_str(ls_status s) {
    switch (s) {
    case LS_OK: return "ok";
    case LS_ERR_ARG: return "bad argument";
    case LS_ERR_NOMEM: return "out of memory";
    case LS_ERR_IO: return "I/O error";
    case LS_ERR_FORMAT: return "malformed input";
    case LS_ERR_TRUNCATED: return "truncated input";
    case LS_ERR_CORRUPT: return "corrupt data";
    case LS_ERR_SCHEMA: return "schema violation";
    case LS_ERR_NONFINITE: return "non-finite value";
    case LS_ERR_SIGNATURE: return "signature verification failed";
    case LS_ERR_UNSUPPORTED: return "unsupported";
    case LS_ERR_MPI: return "collective failed";
    case LS_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
