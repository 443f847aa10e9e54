/* Strict parsing of the CLI's numbers and lists: the one implementation
 * behind every numeric or list option of every command, and behind the
 * arguments and report lines the hidden worker commands exchange.
 *
 *   integer  decimal digits only: no sign, blank, "0x", suffix or trailing
 *            text; no overflow; inside [lo, hi].
 *   size     an integer with an optional binary suffix K, M, G or T (either
 *            case) = 2^10, 2^20, 2^30, 2^40 (64M = 67108864, as `bench xport
 *            --size 64M` has always meant); taken only by options that say
 *            so (sizes in bytes, element counts). Overflow is refused.
 *   real     strtod's decimal or exponent syntax, consumed whole; finite
 *            (no inf, nan or hex); inside the interval given.
 *   list     items separated by commas, none empty, at most a given count.
 *
 * Key=value lists on the command line are parallel specs, parsed (and their
 * duplicate keys refused) by the library's ferry_parallel_parse. */
#ifndef FERRY_TOOLS_CLI_PARSE_H
#define FERRY_TOOLS_CLI_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The prefix of error messages, "ferry" until main names the command. */
void cli_parse_set_who(const char *who);
const char *cli_parse_who(void);

/* Scanners: NULL when s is valid (*out set), else why not (a static string,
 * *out unchanged). A NULL s is "no value". */
const char *cli_scan_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
const char *cli_scan_size(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* An interval of reals; open ends exclude the bound. */
typedef struct cli_range {
    double lo, hi;
    bool lo_open, hi_open;
} cli_range_t;
const char *cli_scan_f64(const char *s, cli_range_t r, double *out);

/* Option forms: on a bad value print "ferry CMD: OPT "VALUE": why; want ..."
 * (nothing more when s is NULL: cli_opt said the value is missing) and
 * return false; the caller exits with CLI_USAGE. */
bool cli_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
bool cli_u32(const char *opt, const char *s, uint32_t lo, uint32_t hi, uint32_t *out);
bool cli_size(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
bool cli_f64(const char *opt, const char *s, cli_range_t r, double *out);
/* A comma list of sizes, 1..max of them, into out[]; *n the count. */
bool cli_size_list(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out, size_t max, size_t *n);
/* A comma list of reals in r, 1..max of them, into out[]; *n the count. */
bool cli_f64_list(const char *opt, const char *s, cli_range_t r, double *out, size_t max, size_t *n);
/* One of words[0..nwords) (exact match); *idx its index. */
bool cli_word(const char *opt, const char *s, const char *const *words, size_t nwords, size_t *idx);
/* A comma list of distinct words from words[]; idx[] their indices in the
 * order given, *n how many (at most nwords). */
bool cli_word_list(const char *opt, const char *s, const char *const *words, size_t nwords, size_t *idx, size_t *n);

/* Splits a line in place at single spaces into at most max fields; returns
 * their count, or SIZE_MAX when there are more or one is empty (the report
 * lines and /proc files the tools read have exactly one space between). */
size_t cli_fields(char *line, char **f, size_t max);

#endif
