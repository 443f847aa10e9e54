/* Helpers shared by writers and readers for deltas in sync mode. */
#include "sync/sync_internal.h"

bool sync_delta_dtype(size_t esz, uint64_t bytes, ferry_dtype_t *dt, uint64_t *elems) {
    /* widths the codec takes; 8-byte elements travel as pairs of 4 */
    size_t width = esz == 8 ? 4 : esz;
    switch (width) {
    case 1: *dt = FERRY_DTYPE_F8_E4M3; break;
    case 2: *dt = FERRY_DTYPE_BF16; break;
    case 4: *dt = FERRY_DTYPE_F32; break;
    default: return false;
    }
    if (bytes % width) return false;
    *elems = bytes / width;
    return true;
}
