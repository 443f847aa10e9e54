#include <math.h>
#include <string.h>

#include "ferry/layout.h"

static const struct {
    const char *name;
    size_t size;
} dtype_table[FERRY_DTYPE_COUNT] = {
    [FERRY_DTYPE_BOOL] = {"BOOL", 1},    [FERRY_DTYPE_U8] = {"U8", 1},
    [FERRY_DTYPE_I8] = {"I8", 1},        [FERRY_DTYPE_U16] = {"U16", 2},
    [FERRY_DTYPE_I16] = {"I16", 2},      [FERRY_DTYPE_U32] = {"U32", 4},
    [FERRY_DTYPE_I32] = {"I32", 4},      [FERRY_DTYPE_U64] = {"U64", 8},
    [FERRY_DTYPE_I64] = {"I64", 8},      [FERRY_DTYPE_F16] = {"F16", 2},
    [FERRY_DTYPE_BF16] = {"BF16", 2},    [FERRY_DTYPE_F32] = {"F32", 4},
    [FERRY_DTYPE_F64] = {"F64", 8},      [FERRY_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [FERRY_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
};

/* torch dtype names as they appear in config.json "torch_dtype". */
static const struct {
    const char *name;
    ferry_dtype_t dtype;
} torch_names[] = {
    {"bool", FERRY_DTYPE_BOOL},       {"uint8", FERRY_DTYPE_U8},
    {"int8", FERRY_DTYPE_I8},         {"uint16", FERRY_DTYPE_U16},
    {"int16", FERRY_DTYPE_I16},       {"uint32", FERRY_DTYPE_U32},
    {"int32", FERRY_DTYPE_I32},       {"uint64", FERRY_DTYPE_U64},
    {"int64", FERRY_DTYPE_I64},       {"float16", FERRY_DTYPE_F16},
    {"half", FERRY_DTYPE_F16},        {"bfloat16", FERRY_DTYPE_BF16},
    {"float32", FERRY_DTYPE_F32},     {"float", FERRY_DTYPE_F32},
    {"float64", FERRY_DTYPE_F64},     {"double", FERRY_DTYPE_F64},
    {"float8_e4m3fn", FERRY_DTYPE_F8_E4M3}, {"float8_e5m2", FERRY_DTYPE_F8_E5M2},
};

size_t ferry_dtype_size(ferry_dtype_t dtype) {
    return (unsigned)dtype < FERRY_DTYPE_COUNT ? dtype_table[dtype].size : 0;
}

const char *ferry_dtype_name(ferry_dtype_t dtype) {
    return (unsigned)dtype < FERRY_DTYPE_COUNT ? dtype_table[dtype].name : "?";
}

bool ferry_dtype_parse(const char *name, ferry_dtype_t *out) {
    if (!name) return false;
    if (strncmp(name, "torch.", 6) == 0) name += 6;
    for (int i = 0; i < FERRY_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_table[i].name) == 0) {
            *out = (ferry_dtype_t)i;
            return true;
        }
    }
    for (size_t i = 0; i < sizeof torch_names / sizeof torch_names[0]; i++) {
        if (strcmp(name, torch_names[i].name) == 0) {
            *out = torch_names[i].dtype;
            return true;
        }
    }
    return false;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

uint16_t ferry_bf16_from_f32(float value) {
    uint32_t u = f32_bits(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float ferry_bf16_to_f32(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A small float format: exp_bits, man_bits, bias, largest finite code
 * (without sign), NaN code, and whether the all-ones exponent means inf. */
typedef struct {
    int man_bits, bias;
    uint8_t max_code, nan_code, inf_code; /* inf_code 0: no infinities */
} fp8_format_t;

static const fp8_format_t e4m3 = {3, 7, 0x7e, 0x7f, 0};
static const fp8_format_t e5m2 = {2, 15, 0x7b, 0x7e, 0x7c};

static uint8_t fp8_encode(const fp8_format_t *f, float value) {
    uint32_t u = f32_bits(value);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t e32 = (u >> 23) & 0xffu, m32 = u & 0x7fffffu;
    if (e32 == 0xff) {
        if (m32) return (uint8_t)(sign | f->nan_code);
        return (uint8_t)(sign | (f->inf_code ? f->inf_code : f->max_code));
    }
    if (e32 == 0) return sign; /* f32 zero or subnormal: far below fp8's smallest step */
    int e = (int)e32 - 127;
    int min_exp = 1 - f->bias;
    int te = e > min_exp ? e : min_exp;
    uint32_t mant = (1u << 23) | m32;
    int shift = 23 + te - e - f->man_bits;
    uint32_t n;
    if (shift >= 25) {
        n = 0;
    } else {
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        n = q;
    }
    /* n counts steps of 2^(te - man_bits); this formula covers subnormals,
     * normals and a rounding carry into the next exponent alike. */
    uint32_t code = ((uint32_t)(te + f->bias - 1) << f->man_bits) + n;
    if (code > f->max_code) code = f->max_code;
    return (uint8_t)(sign | code);
}

static float fp8_decode(const fp8_format_t *f, uint8_t bits) {
    uint8_t mag = bits & 0x7f;
    float sign = (bits & 0x80) ? -1.0f : 1.0f;
    if (f->inf_code) {
        if (mag == f->inf_code) return sign * INFINITY;
        if (mag > f->inf_code) return NAN;
    } else if (mag == f->nan_code) {
        return NAN;
    }
    int expfield = mag >> f->man_bits;
    int m = mag & ((1 << f->man_bits) - 1);
    float v;
    if (expfield == 0)
        v = ldexpf((float)m, 1 - f->bias - f->man_bits);
    else
        v = ldexpf((float)((1 << f->man_bits) + m), expfield - f->bias - f->man_bits);
    return sign * v;
}

uint8_t ferry_fp8_e4m3_from_f32(float value) { return fp8_encode(&e4m3, value); }
float ferry_fp8_e4m3_to_f32(uint8_t bits) { return fp8_decode(&e4m3, bits); }
uint8_t ferry_fp8_e5m2_from_f32(float value) { return fp8_encode(&e5m2, value); }
float ferry_fp8_e5m2_to_f32(uint8_t bits) { return fp8_decode(&e5m2, bits); }
