/* Copies that do not pull the destination into the cache. A large copy
 * whose destination is not read again soon (weights landing in an engine's
 * buffers) moves a third less memory traffic with streaming stores: the
 * ordinary store first reads each destination line (read-for-ownership). */
#ifndef FERRY_COMMON_COPY_H
#define FERRY_COMMON_COPY_H

#include <stddef.h>

/* Copies n bytes from src to dst (not overlapping) with non-temporal stores
 * where the CPU has them (AVX2 or AVX-512), else memcpy. The stores are
 * fenced before it returns, so the bytes are visible like a memcpy's. The
 * source is read with ordinary loads, so it is in the cache afterwards.
 * Thread-safety: any number of threads (the CPU check is cached, racing
 * threads compute the same). */
void ferry_copy_stream(void *dst, const void *src, size_t n);

#endif
