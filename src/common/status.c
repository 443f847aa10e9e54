#include <stddef.h>

#include "ferry/status.h"

typedef struct {
    ferry_status_t status;
    const char *name;
    const char *text;
} status_entry_t;

static const status_entry_t status_table[] = {
    {FERRY_OK, "FERRY_OK", "success"},
    {FERRY_ERR_INVALID_ARGUMENT, "FERRY_ERR_INVALID_ARGUMENT", "invalid argument"},
    {FERRY_ERR_INVALID_CONFIG, "FERRY_ERR_INVALID_CONFIG", "invalid configuration"},
    {FERRY_ERR_UNSUPPORTED, "FERRY_ERR_UNSUPPORTED", "not supported"},
    {FERRY_ERR_NOT_FOUND, "FERRY_ERR_NOT_FOUND", "not found"},
    {FERRY_ERR_COVERAGE, "FERRY_ERR_COVERAGE", "pieces leave a gap or overlap"},
    {FERRY_ERR_MISMATCH, "FERRY_ERR_MISMATCH", "descriptions disagree"},
    {FERRY_ERR_CORRUPT, "FERRY_ERR_CORRUPT", "corrupt data"},
    {FERRY_ERR_NO_MEMORY, "FERRY_ERR_NO_MEMORY", "out of memory"},
    {FERRY_ERR_IO, "FERRY_ERR_IO", "I/O error"},
    {FERRY_ERR_LIMIT, "FERRY_ERR_LIMIT", "hard limit exceeded"},
    {FERRY_ERR_TIMEOUT, "FERRY_ERR_TIMEOUT", "timed out"},
    {FERRY_ERR_PEER_LOST, "FERRY_ERR_PEER_LOST", "peer lost"},
    {FERRY_ERR_INTERRUPTED, "FERRY_ERR_INTERRUPTED", "interrupted (the context's interrupt hook cut a wait short)"},
    {FERRY_ERR_BUSY, "FERRY_ERR_BUSY", "busy"},
    {FERRY_ERR_STALE, "FERRY_ERR_STALE", "stale"},
    {FERRY_ERR_INTERNAL, "FERRY_ERR_INTERNAL", "internal error (a bug in ferry)"},
};

static const status_entry_t *find(ferry_status_t status) {
    for (size_t i = 0; i < sizeof status_table / sizeof status_table[0]; i++)
        if (status_table[i].status == status) return &status_table[i];
    return 0;
}

const char *ferry_status_name(ferry_status_t status) {
    const status_entry_t *e = find(status);
    return e ? e->name : "FERRY_ERR_UNKNOWN";
}

const char *ferry_status_describe(ferry_status_t status) {
    const status_entry_t *e = find(status);
    return e ? e->text : "unknown status";
}
