/* Golden piece lists for small configurations (tests/golden/cases.txt): the
 * builders' output must not change unnoticed. Engine specs load with quant
 * auto (a config with quantization_config gives an fp8 engine), trainer
 * specs with quant none, as the sync's two sides do. FERRY_UPDATE_GOLDEN=1 rewrites
 * the expected files; review their diff before committing. */
#include "check.h"

static void dump(const ferry_layout_t *l, FILE *f) {
    const ferry_model_t *m = ferry_layout_model(l);
    char spec[256];
    ferry_parallel_format(ferry_layout_parallel(l), spec, sizeof spec);
    fprintf(f, "# %s %s: %u ranks, %u buffers, %zu pieces, digest %016llx\n", ferry_model_name(m), spec,
            ferry_layout_world_size(l), ferry_layout_buffer_count(l), ferry_layout_piece_count(l),
            (unsigned long long)ferry_layout_digest(l));
    for (size_t i = 0; i < ferry_layout_piece_count(l); i++) {
        const ferry_piece_t *p = &ferry_layout_pieces(l)[i];
        ferry_tensor_info_t t;
        ferry_buffer_info_t b;
        ferry_model_tensor(m, p->tensor, &t);
        ferry_layout_buffer(l, p->buffer, &b);
        char box[128];
        ferry_box_format(&p->box, box, sizeof box);
        fprintf(f, "r%u %s @%llu s[", p->rank, b.name, (unsigned long long)p->byte_offset);
        for (uint32_t d = 0; d < p->box.ndim; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)p->strides[d]);
        fprintf(f, "] <- %s %s\n", t.name, box);
    }
}

int main(void) {
    ferry_ctx_t *ctx = test_ctx();
    bool update = getenv("FERRY_UPDATE_GOLDEN") && strcmp(getenv("FERRY_UPDATE_GOLDEN"), "1") == 0;
    char path[1024], line[512];
    snprintf(path, sizeof path, "%s/cases.txt", FERRY_TEST_GOLDEN);
    FILE *cases = fopen(path, "r");
    CHECK(cases);
    int n = 0, failed = 0;
    while (fgets(line, sizeof line, cases)) {
        char cfg[128], side[16], spec[256];
        if (line[0] == '#' || sscanf(line, "%127s %15s %255s", cfg, side, spec) != 3) continue;
        snprintf(path, sizeof path, "%s/%s", FERRY_TEST_GOLDEN, cfg);
        ferry_model_t *m = NULL;
        ferry_side_t s = !strcmp(side, "train") ? FERRY_SIDE_TRAIN : FERRY_SIDE_INFER;
        ferry_model_options_t opts = {.field_mask = FERRY_MODEL_OPT_QUANT,
                                      .quant = s == FERRY_SIDE_INFER ? FERRY_MODEL_QUANT_AUTO : FERRY_MODEL_QUANT_NONE};
        CHECK_OK(ferry_model_from_hf_config_file(ctx, path, &opts, &m), ferry_ctx_error(ctx));
        ferry_layout_t *l = test_layout(ctx, m, s, spec);
        CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
        char *got = NULL;
        size_t got_len = 0;
        FILE *mem = open_memstream(&got, &got_len);
        CHECK(mem);
        dump(l, mem);
        fclose(mem);
        char golden[1024];
        snprintf(golden, sizeof golden, "%s/%.*s.%s.%d.txt", FERRY_TEST_GOLDEN, (int)(strlen(cfg) - 5), cfg,
                 side, n);
        if (update) {
            FILE *f = fopen(golden, "w");
            CHECK(f && fwrite(got, 1, got_len, f) == got_len);
            fclose(f);
            printf("wrote %s\n", golden);
        } else {
            size_t want_len;
            char *want = (char *)test_read_file(golden, &want_len);
            if (!want || want_len != got_len || memcmp(want, got, got_len) != 0) {
                fprintf(stderr, "%s %s %s: pieces differ from %s (FERRY_UPDATE_GOLDEN=1 rewrites it)\n--- got:\n%s",
                        cfg, side, spec, golden, got);
                failed++;
            }
            free(want);
        }
        free(got);
        ferry_layout_destroy(l);
        ferry_model_destroy(m);
        n++;
    }
    fclose(cases);
    CHECK(n >= 8);
    CHECK(failed == 0);
    ferry_ctx_destroy(ctx);
    return 0;
}
