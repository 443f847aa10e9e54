/* Strict number and list parsing for the CLI (see cli_parse.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_parse.h"

static const char *who = "ferry";

void cli_parse_set_who(const char *w) { who = w && *w ? w : "ferry"; }

const char *cli_parse_who(void) { return who; }

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Digits of s[0..) into *v; the first character that is not a digit in *end. */
static const char *scan_digits(const char *s, uint64_t *v, const char **end) {
    if (!s) return "no value";
    if (!*s) return "empty value";
    if (*s == '-') return "negative";
    if (*s == '+' || *s == ' ' || *s == '\t') return "a sign or blank before the number";
    if (!is_digit(*s)) return "not a number";
    uint64_t x = 0;
    bool over = false;
    for (; is_digit(*s); s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (x > (UINT64_MAX - d) / 10) over = true;
        else x = x * 10 + d;
    }
    *end = s;
    *v = x;
    return over ? "out of range" : NULL;
}

const char *cli_scan_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    uint64_t v;
    const char *end, *why = scan_digits(s, &v, &end);
    if (why) return why;
    if (*end) {
        if (strchr("kKmMgGtT", *end) && !end[1]) return "a size suffix, which this option does not take";
        if (*end == '.' || *end == 'e' || *end == 'E') return "not an integer";
        return "trailing characters after the number";
    }
    if (v < lo || v > hi) return "out of range";
    *out = v;
    return NULL;
}

const char *cli_scan_size(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    uint64_t v;
    const char *end, *why = scan_digits(s, &v, &end);
    if (why) return why;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: return *end == '.' ? "not an integer" : "not a size (digits with an optional K, M, G or T)";
    }
    if (shift && end[1]) return "trailing characters after the suffix (K, M, G, T alone: powers of 1024)";
    if (shift && v > (UINT64_MAX >> shift)) return "out of range";
    v <<= shift;
    if (v < lo || v > hi) return "out of range";
    *out = v;
    return NULL;
}

static bool in_range(double v, cli_range_t r) {
    if (r.lo_open ? !(v > r.lo) : !(v >= r.lo)) return false;
    return r.hi_open ? v < r.hi : v <= r.hi;
}

const char *cli_scan_f64(const char *s, cli_range_t r, double *out) {
    if (!s) return "no value";
    if (!*s) return "empty value";
    /* strtod alone would take blanks, "inf", "nan" and hex: only decimal syntax */
    for (const char *p = s; *p; p++)
        if (!is_digit(*p) && !strchr("+-.eE", *p)) return "not a decimal number";
    if (!is_digit(s[0]) && !((s[0] == '-' || s[0] == '+' || s[0] == '.') && (is_digit(s[1]) || s[1] == '.')))
        return "not a decimal number";
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end) return "not a decimal number";
    if (!isfinite(v)) return "out of range";
    if (errno == ERANGE) return "too close to zero to represent";
    if (!in_range(v, r)) return "out of range";
    *out = v;
    return NULL;
}

static void range_text(char *buf, size_t size, cli_range_t r) {
    snprintf(buf, size, "%c%g, %g%c", r.lo_open ? '(' : '[', r.lo, r.hi, r.hi_open ? ')' : ']');
}

static void size_text(char *buf, size_t size, uint64_t v) {
    static const char suffix[] = "KMGT";
    int k = -1;
    uint64_t x = v;
    while (x && k < 3 && (x & 1023) == 0) x >>= 10, k++;
    if (k >= 0) snprintf(buf, size, "%llu (%llu%c)", (unsigned long long)v, (unsigned long long)x, suffix[k]);
    else snprintf(buf, size, "%llu", (unsigned long long)v);
}

static bool fail(const char *opt, const char *s, const char *why, const char *want) {
    if (!s) return false; /* cli_opt said so */
    fprintf(stderr, "%s: %s \"%s\": %s; want %s\n", who, opt, s, why, want);
    return false;
}

bool cli_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    const char *why = cli_scan_u64(s, lo, hi, out);
    if (!why) return true;
    char want[96];
    snprintf(want, sizeof want, "an integer from %llu to %llu", (unsigned long long)lo, (unsigned long long)hi);
    return fail(opt, s, why, want);
}

bool cli_u32(const char *opt, const char *s, uint32_t lo, uint32_t hi, uint32_t *out) {
    uint64_t v;
    if (!cli_u64(opt, s, lo, hi, &v)) return false;
    *out = (uint32_t)v;
    return true;
}

bool cli_size(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    const char *why = cli_scan_size(s, lo, hi, out);
    if (!why) return true;
    char a[48], b[48], want[192];
    size_text(a, sizeof a, lo);
    size_text(b, sizeof b, hi);
    snprintf(want, sizeof want, "from %s to %s; suffixes K, M, G, T are powers of 1024", a, b);
    return fail(opt, s, why, want);
}

bool cli_f64(const char *opt, const char *s, cli_range_t r, double *out) {
    const char *why = cli_scan_f64(s, r, out);
    if (!why) return true;
    char iv[96], want[128];
    range_text(iv, sizeof iv, r);
    snprintf(want, sizeof want, "a decimal number in %s", iv);
    return fail(opt, s, why, want);
}

/* The next comma-separated item of *p (its length in *len); false when an
 * item is empty. Moves *p past the item and its comma, or to NULL after the
 * last item. */
static bool next_item(const char **p, const char **item, size_t *len) {
    const char *c = strchr(*p, ',');
    *item = *p;
    *len = c ? (size_t)(c - *p) : strlen(*p);
    *p = c ? c + 1 : NULL;
    return *len > 0;
}

/* One comma list: each item copied out and scanned by scan(item, i) into
 * the caller's i-th output; `what` names an item in the too-long message. */
typedef const char *(*item_scan_fn)(const char *item, size_t i, void *arg);
static bool scan_list(const char *opt, const char *s, const char *want, const char *what, size_t max, size_t *n,
                      item_scan_fn scan, void *arg) {
    const char *p = s;
    *n = 0;
    do {
        const char *item;
        size_t len;
        if (!next_item(&p, &item, &len)) return fail(opt, s, "an empty item", want);
        if (*n == max) return fail(opt, s, "too many items", want);
        char buf[64], detail[160]; /* the item (< 64) and the longest reason fit */
        if (len >= sizeof buf) {
            snprintf(detail, sizeof detail, "an item too long to be %s", what);
            return fail(opt, s, detail, want);
        }
        memcpy(buf, item, len);
        buf[len] = '\0';
        const char *why = scan(buf, *n, arg);
        if (why) {
            snprintf(detail, sizeof detail, "item \"%s\": %s", buf, why);
            return fail(opt, s, detail, want);
        }
        (*n)++;
    } while (p);
    return true;
}

typedef struct {
    uint64_t lo, hi, *out;
} size_items_t;
static const char *scan_size_item(const char *item, size_t i, void *arg) {
    size_items_t *a = arg;
    return cli_scan_size(item, a->lo, a->hi, &a->out[i]);
}

bool cli_size_list(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out, size_t max, size_t *n) {
    if (!s) return false;
    char want[256], a[48], b[48];
    size_text(a, sizeof a, lo);
    size_text(b, sizeof b, hi);
    snprintf(want, sizeof want, "1 to %zu comma-separated sizes, each from %s to %s (K, M, G, T: powers of 1024)", max,
             a, b);
    size_items_t items = {lo, hi, out};
    return scan_list(opt, s, want, "a size", max, n, scan_size_item, &items);
}

typedef struct {
    cli_range_t r;
    double *out;
} f64_items_t;
static const char *scan_f64_item(const char *item, size_t i, void *arg) {
    f64_items_t *a = arg;
    return cli_scan_f64(item, a->r, &a->out[i]);
}

bool cli_f64_list(const char *opt, const char *s, cli_range_t r, double *out, size_t max, size_t *n) {
    if (!s) return false;
    char iv[96], want[192];
    range_text(iv, sizeof iv, r);
    snprintf(want, sizeof want, "1 to %zu comma-separated decimal numbers, each in %s", max, iv);
    f64_items_t items = {r, out};
    return scan_list(opt, s, want, "a number", max, n, scan_f64_item, &items);
}

/* "a, b or c" (last " or ") or "a, b, c" (last ", "). */
static void words_text(char *buf, size_t size, const char *const *words, size_t nwords, const char *last) {
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < nwords && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s", i ? (i + 1 == nwords ? last : ", ") : "", words[i]);
}

bool cli_word(const char *opt, const char *s, const char *const *words, size_t nwords, size_t *idx) {
    if (!s) return false;
    for (size_t i = 0; i < nwords; i++)
        if (!strcmp(s, words[i])) {
            *idx = i;
            return true;
        }
    char want[256];
    words_text(want, sizeof want, words, nwords, " or ");
    return fail(opt, s, "not a choice", want);
}

bool cli_word_list(const char *opt, const char *s, const char *const *words, size_t nwords, size_t *idx, size_t *n) {
    if (!s) return false;
    char list[256], want[320];
    words_text(list, sizeof list, words, nwords, ", ");
    snprintf(want, sizeof want, "a comma list of distinct names from: %s", list);
    const char *p = s;
    *n = 0;
    do {
        const char *item;
        size_t len;
        if (!next_item(&p, &item, &len)) return fail(opt, s, "an empty item", want);
        size_t k = 0;
        while (k < nwords && !(strlen(words[k]) == len && !strncmp(item, words[k], len))) k++;
        char detail[128];
        if (k == nwords) {
            snprintf(detail, sizeof detail, "\"%.*s\" is not a choice", (int)(len < 64 ? len : 64), item);
            return fail(opt, s, detail, want);
        }
        for (size_t j = 0; j < *n; j++)
            if (idx[j] == k) {
                snprintf(detail, sizeof detail, "\"%s\" given twice", words[k]);
                return fail(opt, s, detail, want);
            }
        idx[(*n)++] = k;
    } while (p);
    return true;
}

size_t cli_fields(char *line, char **f, size_t max) {
    size_t n = 0;
    char *p = line;
    for (;;) {
        if (n == max) return SIZE_MAX;
        char *sp = strchr(p, ' ');
        if (sp == p || !*p) return SIZE_MAX;
        f[n++] = p;
        if (!sp) return n;
        *sp = '\0';
        p = sp + 1;
    }
}
