/* ferry bench delta's floor measurement (bench_floor.c). */
#ifndef FERRY_TOOLS_BENCH_FLOOR_H
#define FERRY_TOOLS_BENCH_FLOOR_H

#include <stdbool.h>
#include <stdint.h>

/* Whether this build and CPU measure the floor (x86-64 with AVX2). */
bool bench_encode_floor_runs(void);
/* Reads base and next (bytes each) once, finds the changed 64-byte lines
 * and takes next's xxh3; returns a value derived from both. */
uint64_t bench_encode_floor(const uint8_t *base, const uint8_t *next, uint64_t bytes);

#endif
