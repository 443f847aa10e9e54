/* The delta area's bytes (sync/delta_area.h):
 * - the layout is pinned: "FDTA", counts, versions, offsets and frame
 *   lengths little-endian at fixed places, whatever the host;
 * - encode then parse gives back every entry and every frame, for areas with
 *   no entries, entries with no ops, empty frames, and many readers; an area
 *   larger than its contents (the writer's worst-case region) parses too;
 * - chains: a reader's steps (several entries, by base version) round-trip,
 *   and sync_delta_chain_find gives each base's steps to the area's version
 *   (held at the oldest, the middle, the newest base; none for a base not
 *   offered or another reader; more steps than allowed is FERRY_ERR_LIMIT);
 * - every malformed area is refused with a detail naming what is wrong: too
 *   small, wrong magic, too many entries, entries past the end, a blob over
 *   the index, past the end or too short for its lengths, a frame longer than
 *   what is left, lengths that wrap around 2^64, bytes after the frames,
 *   entries out of (reader, base) order or repeated, a base not below the
 *   area's version, a reader's steps with different ops; and encoding into
 *   too little room is refused. */
#include "check.h"
#include "common/bytes.h"
#include "sync/delta_area.h"

static uint8_t area[1 << 16];

static void expect_refused(const uint8_t *a, uint64_t size, const char *needle) {
    sync_delta_header_t h = {7, 7};
    sync_delta_entry_t es[64];
    ferry_errbuf_t err;
    CHECK_FAILS(sync_delta_area_parse(a, size, &h, es, 64, &err), FERRY_ERR_CORRUPT, err.text, needle);
    CHECK(h.entries == 7 && h.version == 7); /* a refusal writes nothing */
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

int main(void) {
    ferry_errbuf_t err;
    uint64_t len;

    /* two readers: reader 3 with frames of 5 and 0 bytes, reader 9 with none */
    static const uint8_t frames3[] = {'a', 'b', 'c', 'd', 'e'};
    static const uint64_t len3[] = {5, 0};
    sync_delta_pair_t pairs[2] = {{.dst_rank = 3, .ops = 2, .base_version = 41, .frames = frames3, .frame_len = len3},
                                  {.dst_rank = 9, .ops = 0, .base_version = 41}};
    CHECK_OK(sync_delta_area_encode(42, pairs, 2, area, sizeof area, &len, &err), err.text);
    CHECK_EQ_INT(len, 16 + 2 * 32 + 16 + 5);
    CHECK_EQ_INT(sync_delta_area_size(pairs, 2), len);
    /* the bytes, field by field */
    CHECK(!memcmp(area, "FDTA", 4) && le(area + 4, 4) == 2 && le(area + 8, 8) == 42);
    const uint8_t *e0 = area + 16, *e1 = area + 48;
    CHECK(le(e0, 4) == 3 && le(e0 + 4, 4) == 2 && le(e0 + 8, 8) == 41 && le(e0 + 16, 8) == 80 && le(e0 + 24, 8) == 21);
    CHECK(le(e1, 4) == 9 && le(e1 + 4, 4) == 0 && le(e1 + 16, 8) == 101 && le(e1 + 24, 8) == 0);
    CHECK(le(area + 80, 8) == 5 && le(area + 88, 8) == 0 && !memcmp(area + 96, "abcde", 5));

    /* and back, in an area larger than its contents */
    sync_delta_header_t h;
    sync_delta_entry_t es[64];
    CHECK_OK(sync_delta_area_parse(area, sizeof area, &h, es, 64, &err), err.text);
    CHECK(h.entries == 2 && h.version == 42);
    CHECK(es[0].dst_rank == 3 && es[0].ops == 2 && es[0].base_version == 41 && es[0].blob == 80 && es[0].blob_len == 21);
    CHECK(sync_delta_frame_len(area + es[0].blob, 0) == 5 && sync_delta_frame_len(area + es[0].blob, 1) == 0);
    CHECK(es[1].dst_rank == 9 && es[1].ops == 0 && es[1].blob_len == 0);
    CHECK_OK(sync_delta_area_parse(area, len, &h, es, 64, &err), err.text); /* exactly its size too */
    CHECK_FAILS(sync_delta_area_parse(area, len, &h, es, 1, &err), FERRY_ERR_LIMIT, err.text, "room for 1");

    /* no entries (what readers see while the writer rewrites the area) */
    CHECK_OK(sync_delta_area_encode(5, NULL, 0, area, sizeof area, &len, &err), err.text);
    CHECK(len == 16 && sync_delta_area_parse(area, 16, &h, es, 0, &err) == FERRY_OK && h.entries == 0 && h.version == 5);

    /* many readers, random frames: every frame comes back */
    {
        enum { N = 40 };
        sync_delta_pair_t ps[N];
        uint64_t lens[N][4];
        uint8_t bytes[N][64];
        for (uint32_t i = 0; i < N; i++) {
            uint64_t total = 0;
            uint32_t ops = (uint32_t)(rng_next() % 5);
            for (uint32_t k = 0; k < ops; k++) total += lens[i][k] = rng_next() % 16;
            for (uint64_t b = 0; b < total; b++) bytes[i][b] = (uint8_t)rng_next();
            ps[i] = (sync_delta_pair_t){i * 7, ops, 100 + i, bytes[i], lens[i]};
        }
        CHECK_OK(sync_delta_area_encode(1000, ps, N, area, sizeof area, &len, &err), err.text);
        CHECK_OK(sync_delta_area_parse(area, len, &h, es, 64, &err), err.text);
        CHECK(h.entries == N);
        for (uint32_t i = 0; i < N; i++) {
            CHECK(es[i].dst_rank == i * 7 && es[i].ops == ps[i].ops && es[i].base_version == 100 + i);
            const uint8_t *blob = area + es[i].blob, *f = blob + 8 * (uint64_t)es[i].ops, *want = bytes[i];
            for (uint32_t k = 0; k < es[i].ops; k++) {
                uint64_t fl = sync_delta_frame_len(blob, k);
                CHECK(fl == lens[i][k] && !memcmp(f, want, fl));
                f += fl;
                want += fl;
            }
        }
        CHECK_FAILS(sync_delta_area_encode(1000, ps, N, area, len - 1, &len, &err), FERRY_ERR_LIMIT, err.text,
                    "bytes, ");
    }

    /* chains: reader 3 offered steps from 38, 39 and 41 (versions need not
       be consecutive), reader 9 one from 41, all to 42 */
    {
        static const uint8_t f[] = {'s', 't', 'e', 'p', '1', '2', '3'};
        static const uint64_t l38[] = {1, 0}, l39[] = {2, 1}, l41[] = {0, 3}, l9[] = {0};
        sync_delta_pair_t cp[4] = {{3, 2, 38, f, l38}, {3, 2, 39, f + 1, l39}, {3, 2, 41, f + 4, l41},
                                   {9, 1, 41, f, l9}};
        CHECK_OK(sync_delta_area_encode(42, cp, 4, area, sizeof area, &len, &err), err.text);
        CHECK_OK(sync_delta_area_parse(area, len, &h, es, 64, &err), err.text);
        CHECK(h.entries == 4 && h.version == 42);
        CHECK(es[2].dst_rank == 3 && es[2].base_version == 41 && !memcmp(area + es[2].blob + 16, "123", 3));
        sync_delta_entry_t st[8];
        uint32_t n = 99;
        const uint8_t *index = area + SYNC_DELTA_HEADER;
        CHECK_OK(sync_delta_chain_find(index, &h, len, 3, 38, st, 8, &n, &err), err.text);
        CHECK(n == 3 && st[0].base_version == 38 && st[1].base_version == 39 && st[2].base_version == 41);
        CHECK(st[0].blob == es[0].blob && st[1].blob_len == es[1].blob_len && st[2].ops == 2);
        CHECK_OK(sync_delta_chain_find(index, &h, len, 3, 39, st, 8, &n, &err), err.text);
        CHECK(n == 2 && st[0].base_version == 39 && st[1].base_version == 41);
        CHECK_OK(sync_delta_chain_find(index, &h, len, 3, 41, st, 8, &n, &err), err.text);
        CHECK(n == 1 && st[0].base_version == 41 && st[0].blob == es[2].blob);
        CHECK_OK(sync_delta_chain_find(index, &h, len, 3, 40, st, 8, &n, &err), err.text);
        CHECK(n == 0); /* no step from 40: nothing for a reader holding it */
        CHECK_OK(sync_delta_chain_find(index, &h, len, 3, 37, st, 8, &n, &err), err.text);
        CHECK(n == 0);
        CHECK_OK(sync_delta_chain_find(index, &h, len, 9, 41, st, 8, &n, &err), err.text);
        CHECK(n == 1 && st[0].dst_rank == 9 && st[0].ops == 1);
        CHECK_OK(sync_delta_chain_find(index, &h, len, 9, 38, st, 8, &n, &err), err.text);
        CHECK(n == 0); /* reader 3's bases are not reader 9's */
        CHECK_OK(sync_delta_chain_find(index, &h, len, 5, 41, st, 8, &n, &err), err.text);
        CHECK(n == 0);
        n = 99;
        CHECK_FAILS(sync_delta_chain_find(index, &h, len, 3, 38, st, 2, &n, &err), FERRY_ERR_LIMIT, err.text,
                    "reader 3's chain from version 38 has more than 2 steps");
        CHECK(n == 99);
        CHECK_OK(sync_delta_chain_find(index, &h, len, 3, 39, st, 2, &n, &err), err.text);
        CHECK(n == 2);
        /* a broken entry among the reader's is refused on the way */
        ferry_put_le(area + 16 + 32 + 8, 38, 8); /* entry 1: base 38 again */
        CHECK_FAILS(sync_delta_chain_find(index, &h, len, 3, 38, st, 8, &n, &err), FERRY_ERR_CORRUPT, err.text,
                    "entry 1 (reader 3, base 38) does not follow entry 0 (reader 3, base 38)");
        expect_refused(area, len, "does not follow entry 0");
        ferry_put_le(area + 16 + 32 + 8, 39, 8);
        ferry_put_le(area + 16 + 64 + 4, 1, 4); /* entry 2: reader 3's step with 1 op */
        CHECK_FAILS(sync_delta_chain_find(index, &h, len, 3, 39, st, 8, &n, &err), FERRY_ERR_CORRUPT, err.text,
                    "entries 1 and 2: reader 3's steps have 2 and 1 ops");
        expect_refused(area, len, "reader 3's steps have 2 and 1 ops");
        ferry_put_le(area + 16 + 64 + 4, 2, 4);
        ferry_put_le(area + 16 + 64 + 8, 42, 8); /* entry 2: a step from the area's own version */
        expect_refused(area, len, "entry 2: base version 42 is not below the area's version 42");
        ferry_put_le(area + 16 + 64 + 8, 41, 8);
        ferry_put_le(area + 16 + 96, 2, 4); /* entry 3: reader 2 after reader 3 */
        expect_refused(area, len, "entry 3 (reader 2, base 41) does not follow entry 2 (reader 3, base 41)");
        ferry_put_le(area + 16 + 96, 9, 4);
        CHECK_OK(sync_delta_area_parse(area, len, &h, es, 64, &err), err.text); /* all put back */
    }

    /* refusals, each from a valid area with one thing broken */
    CHECK_OK(sync_delta_area_encode(42, pairs, 2, area, sizeof area, &len, &err), err.text);
    uint8_t good[256];
    memcpy(good, area, len);
    uint64_t glen = len;
#define RESET() memcpy(area, good, glen)
    expect_refused(area, 15, "no room for its 16-byte header");
    area[0] = 'X';
    expect_refused(area, glen, "magic");
    RESET();
    ferry_put_le(area + 4, (1u << 20) + 1, 4);
    expect_refused(area, sizeof area, "the limit is 1048576");
    RESET();
    ferry_put_le(area + 4, 3, 4);
    expect_refused(area, 100, "3 entries end at byte 112, past its 100 bytes");
    RESET();
    ferry_put_le(area + 16 + 16, 70, 8); /* entry 0's blob inside the index */
    expect_refused(area, glen, "overlaps the 80 bytes of header and entries");
    RESET();
    ferry_put_le(area + 16 + 24, 1000, 8); /* entry 0's blob past the end */
    expect_refused(area, glen, "past the area's 101 bytes");
    RESET();
    ferry_put_le(area + 16 + 16, UINT64_MAX - 4, 8); /* offset + length wraps */
    expect_refused(area, glen, "past the area's");
    RESET();
    ferry_put_le(area + 16 + 24, 8, 8); /* 2 ops need 16 bytes of lengths */
    expect_refused(area, glen, "cannot hold the lengths of 2 frames");
    RESET();
    ferry_put_le(area + 80, 6, 8); /* frame 0 longer than what is left */
    expect_refused(area, glen, "frame 0 of 2 is 6 bytes, 5 are left");
    RESET();
    ferry_put_le(area + 80, UINT64_MAX, 8); /* lengths that would wrap */
    ferry_put_le(area + 88, 6, 8);
    expect_refused(area, glen, "frame 0 of 2 is 18446744073709551615 bytes");
    RESET();
    ferry_put_le(area + 80, 4, 8); /* a byte after the frames */
    expect_refused(area, glen, "1 bytes after its 2 frames");
    RESET();
    /* the reader's piecewise calls say the same */
    CHECK_FAILS(sync_delta_entry_parse(area + 16, 2, &(sync_delta_header_t){2, 42}, glen, &es[0], &err),
                FERRY_ERR_CORRUPT, err.text,
                "entry 2 of 2");
    printf("test_sync_delta_area: layout pinned little-endian, round trips (empty, zero ops, 40 readers, a chain of "
           "3 steps), chains found from every base, 16 malformed areas refused with their reason\n");
    return 0;
}
