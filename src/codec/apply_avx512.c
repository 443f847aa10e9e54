/* The batch walk of a sparse apply built for AVX-512 (BW, VPOPCNTDQ) and
 * BMI2: class masks straight from compares, running counts in vectors, each
 * change's block found by two 32-lane compares, its element by PDEP (fast on
 * every CPU with AVX-512). Picked at run time (delta_apply_batches_pick). */
#include "codec/codec_internal.h"
#include "common/hash.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define APPLY_BATCHES_FN delta_apply_batches_avx512
#define APPLY_ATTR __attribute__((target("avx512f,avx512bw,avx512vpopcntdq,bmi,bmi2,popcnt")))
#define APPLY_AVX512
#define APPLY_LINKAGE /* extern */
#include "codec/apply_batches.h"
#endif
