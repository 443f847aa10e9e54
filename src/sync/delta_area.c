/* Helpers shared by writers and readers: deltas in sync mode, element sizes. */
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

size_t sync_op_esz(const sync_member_t *m, const ferry_copy_op_t *op) {
    ferry_tensor_info_t ti;
    ferry_model_tensor(ferry_layout_model(m->side[1].layout), op->tensor, &ti);
    return ferry_dtype_size(ti.dtype);
}
