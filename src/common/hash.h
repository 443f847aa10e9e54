/* xxh3 at the speed of the best vector unit the CPU has. Debian's
 * libxxhash exports runtime-dispatching entry points on x86-64 (SSE2, AVX2,
 * AVX-512); the results are identical on every path, so members on
 * different CPUs agree. Bulk checksums (sync, table) include this. */
#ifndef FERRY_COMMON_HASH_H
#define FERRY_COMMON_HASH_H

#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

#endif
