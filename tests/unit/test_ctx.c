/* Context: status names, creation, version, custom allocator (leak
 * accounting across model and layout), log callback and level, FERRY_*
 * environment configuration. */
#include <stdint.h>
#include <string.h>

#include "check.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* ---- status ------------------------------------------------------------- */

static void test_status(void) {
#define S(code) {code, #code}
    static const struct {
        ferry_status_t status;
        const char *name;
    } codes[] = {
        S(FERRY_OK),
        S(FERRY_ERR_INVALID_ARGUMENT),
        S(FERRY_ERR_INVALID_CONFIG),
        S(FERRY_ERR_UNSUPPORTED),
        S(FERRY_ERR_NOT_FOUND),
        S(FERRY_ERR_COVERAGE),
        S(FERRY_ERR_MISMATCH),
        S(FERRY_ERR_CORRUPT),
        S(FERRY_ERR_NO_MEMORY),
        S(FERRY_ERR_IO),
        S(FERRY_ERR_LIMIT),
        S(FERRY_ERR_TIMEOUT),
        S(FERRY_ERR_PEER_LOST),
        S(FERRY_ERR_INTERRUPTED),
        S(FERRY_ERR_BUSY),
        S(FERRY_ERR_STALE),
        S(FERRY_ERR_INTERNAL),
    };
#undef S
    const size_t n = sizeof codes / sizeof codes[0];
    const char *unknown_name = ferry_status_name((ferry_status_t)999);
    const char *unknown_text = ferry_status_describe((ferry_status_t)999);
    CHECK(unknown_name != NULL && unknown_name[0] != '\0');
    CHECK(unknown_text != NULL && unknown_text[0] != '\0');

    for (size_t i = 0; i < n; i++) {
        const char *name = ferry_status_name(codes[i].status);
        const char *text = ferry_status_describe(codes[i].status);
        CHECK(name != NULL && text != NULL);
        if (strcmp(name, codes[i].name) != 0) {
            fprintf(stderr, "ferry_status_name(%d) = \"%s\", expected \"%s\"\n",
                    (int)codes[i].status, name, codes[i].name);
            exit(1);
        }
        CHECK(text[0] != '\0');
        CHECK(strcmp(text, unknown_text) != 0);
        CHECK(strcmp(name, unknown_name) != 0);
        for (size_t j = 0; j < i; j++) {
            CHECK(strcmp(text, ferry_status_describe(codes[j].status)) != 0);
        }
    }
    /* pinned values */
    CHECK_EQ_INT(FERRY_OK, 0);
    CHECK_EQ_INT(FERRY_ERR_INVALID_ARGUMENT, 100);
    CHECK_EQ_INT(FERRY_ERR_COVERAGE, 200);
    CHECK_EQ_INT(FERRY_ERR_NO_MEMORY, 300);
    CHECK_EQ_INT(FERRY_ERR_TIMEOUT, 400);
    CHECK_EQ_INT(FERRY_ERR_INTERRUPTED, 402);
    CHECK_EQ_INT(FERRY_ERR_BUSY, 500);
    CHECK_EQ_INT(FERRY_ERR_INTERNAL, 900);

    /* unknown codes, including neighbours of real ones */
    const int bad[] = {1, -1, 99, 104, 199, 203, 303, 403, 502, 899, 901, 999, 12345};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *name = ferry_status_name((ferry_status_t)bad[i]);
        const char *text = ferry_status_describe((ferry_status_t)bad[i]);
        CHECK(name != NULL && name[0] != '\0');
        CHECK(text != NULL && text[0] != '\0');
        CHECK(strcmp(name, unknown_name) == 0);
        for (size_t j = 0; j < n; j++) CHECK(strcmp(name, codes[j].name) != 0);
    }
}

/* ---- creation, version -------------------------------------------------- */

static void test_create_defaults(void) {
    char detail[512];
    ferry_ctx_t *ctx = NULL;
    CHECK_OK(ferry_ctx_create(NULL, &ctx, detail, sizeof detail), detail);
    CHECK(ctx != NULL);
    CHECK(strcmp(detail, "") == 0);
    CHECK(strcmp(ferry_ctx_error(ctx), "") == 0);
    CHECK_EQ_INT(ferry_ctx_log_level(ctx), FERRY_LOG_WARN);
    ferry_ctx_destroy(ctx);

    /* detail is optional */
    ctx = NULL;
    CHECK_OK(ferry_ctx_create(NULL, &ctx, NULL, 0), "(no detail)");
    ferry_ctx_destroy(ctx);

    ferry_ctx_destroy(NULL); /* no-op */

    const char *v = ferry_version_string();
    CHECK(v != NULL);
    CHECK(strcmp(v, STR(FERRY_VERSION_MAJOR) "." STR(FERRY_VERSION_MINOR) "." STR(
                        FERRY_VERSION_PATCH)) == 0);
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR,
             FERRY_VERSION_PATCH);
    CHECK(strcmp(v, want) == 0);
}

/* ---- allocator ---------------------------------------------------------- */

typedef struct {
    long live;
    long allocs;   /* alloc calls + realloc(NULL) calls */
    long reallocs; /* realloc of an existing block */
    long frees;
} counting_t;

static void *count_alloc(void *opaque, size_t size) {
    counting_t *c = opaque;
    void *p = malloc(size ? size : 1);
    if (p) {
        c->live++;
        c->allocs++;
    }
    return p;
}

static void *count_realloc(void *opaque, void *ptr, size_t size) {
    counting_t *c = opaque;
    void *p = realloc(ptr, size ? size : 1);
    if (p) {
        if (ptr) {
            c->reallocs++;
        } else {
            c->live++;
            c->allocs++;
        }
    }
    return p;
}

static void count_free(void *opaque, void *ptr) {
    counting_t *c = opaque;
    if (ptr) {
        c->live--;
        c->frees++;
    }
    free(ptr);
}

static ferry_ctx_params_t counting_params(counting_t *c) {
    ferry_ctx_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = FERRY_CTX_PARAM_ALLOCATOR;
    p.allocator.alloc = count_alloc;
    p.allocator.realloc = count_realloc;
    p.allocator.free = count_free;
    p.allocator.opaque = c;
    return p;
}

static void test_allocator(void) {
    counting_t c;
    memset(&c, 0, sizeof c);
    ferry_ctx_params_t params = counting_params(&c);
    char detail[512];
    ferry_ctx_t *ctx = NULL;
    CHECK_OK(ferry_ctx_create(&params, &ctx, detail, sizeof detail), detail);
    CHECK(c.live > 0); /* the context itself came from the allocator */

    long before_model = c.allocs;
    ferry_model_t *m = test_model(ctx, "qwen3-0.6b", NULL);
    CHECK(c.allocs > before_model);
    long before_layout = c.allocs;
    ferry_layout_t *l = test_layout(ctx, m, FERRY_SIDE_TRAIN, "tp=2,pp=2");
    CHECK(c.allocs > before_layout);
    CHECK(ferry_layout_piece_count(l) > 0);
    CHECK_EQ_INT(ferry_layout_world_size(l), 4);

    ferry_layout_destroy(l);
    ferry_model_destroy(m);
    ferry_ctx_destroy(ctx);
    if (c.live != 0) {
        fprintf(stderr, "%ld allocations still live after destroying everything "
                        "(%ld allocs, %ld reallocs, %ld frees)\n",
                c.live, c.allocs, c.reallocs, c.frees);
        exit(1);
    }
    CHECK(c.allocs > 2);
    CHECK_EQ_INT(c.frees, c.allocs);

    /* a failed creation (bad FERRY_LOG) leaks nothing either */
    memset(&c, 0, sizeof c);
    setenv("FERRY_LOG", "bogus", 1);
    ctx = NULL;
    CHECK(ferry_ctx_create(&params, &ctx, detail, sizeof detail) == FERRY_ERR_INVALID_CONFIG);
    unsetenv("FERRY_LOG");
    CHECK(ctx == NULL);
    CHECK_EQ_INT(c.live, 0);
    CHECK(c.allocs > 0);

    /* an allocator missing any one function is refused */
    for (int missing = 0; missing < 3; missing++) {
        ferry_ctx_params_t bad = counting_params(&c);
        if (missing == 0) bad.allocator.alloc = NULL;
        if (missing == 1) bad.allocator.realloc = NULL;
        if (missing == 2) bad.allocator.free = NULL;
        memset(&c, 0, sizeof c);
        ctx = NULL;
        detail[0] = '\0';
        CHECK_FAILS(ferry_ctx_create(&bad, &ctx, detail, sizeof detail),
                    FERRY_ERR_INVALID_ARGUMENT, detail, "allocator");
        CHECK(ctx == NULL);
        CHECK_EQ_INT(c.live, 0);
    }

    /* without the mask bit the allocator fields are ignored */
    ferry_ctx_params_t unset;
    memset(&unset, 0, sizeof unset);
    ctx = NULL;
    CHECK_OK(ferry_ctx_create(&unset, &ctx, detail, sizeof detail), detail);
    ferry_ctx_destroy(ctx);
}

/* ---- logging ------------------------------------------------------------ */

typedef struct {
    int count;
    int by_level[5];
    int bad; /* empty or NULL message, or a level out of range */
} log_sink_t;

static void sink_log(void *opaque, ferry_log_level_t level, const char *message) {
    log_sink_t *s = opaque;
    s->count++;
    if ((unsigned)level >= FERRY_LOG_OFF || !message || !message[0]) {
        s->bad++;
        return;
    }
    s->by_level[level]++;
}

static ferry_ctx_t *logging_ctx(log_sink_t *sink, ferry_log_level_t level) {
    ferry_ctx_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = FERRY_CTX_PARAM_LOG_FN | FERRY_CTX_PARAM_LOG_LEVEL;
    p.log_fn = sink_log;
    p.log_opaque = sink;
    p.log_level = level;
    char detail[512];
    ferry_ctx_t *ctx = NULL;
    CHECK_OK(ferry_ctx_create(&p, &ctx, detail, sizeof detail), detail);
    CHECK_EQ_INT(ferry_ctx_log_level(ctx), level);
    return ctx;
}

static void test_logging(void) {
    log_sink_t sink;
    memset(&sink, 0, sizeof sink);
    ferry_ctx_t *ctx = logging_ctx(&sink, FERRY_LOG_DEBUG);
    ferry_model_t *m = test_model(ctx, "qwen3-0.6b", NULL);
    CHECK(sink.count >= 1);
    CHECK(sink.by_level[FERRY_LOG_DEBUG] >= 1);
    CHECK_EQ_INT(sink.bad, 0);
    ferry_model_destroy(m);
    ferry_ctx_destroy(ctx);

    /* at error level the same work logs nothing */
    memset(&sink, 0, sizeof sink);
    ctx = logging_ctx(&sink, FERRY_LOG_ERROR);
    m = test_model(ctx, "qwen3-0.6b", NULL);
    ferry_layout_t *l = test_layout(ctx, m, FERRY_SIDE_TRAIN, "tp=2,pp=2");
    CHECK_EQ_INT(sink.count, 0);
    ferry_layout_destroy(l);
    ferry_model_destroy(m);
    ferry_ctx_destroy(ctx);

    /* off: nothing either */
    memset(&sink, 0, sizeof sink);
    ctx = logging_ctx(&sink, FERRY_LOG_OFF);
    m = test_model(ctx, "qwen3-0.6b", NULL);
    CHECK_EQ_INT(sink.count, 0);
    ferry_model_destroy(m);
    ferry_ctx_destroy(ctx);

    /* the level parameter overrides FERRY_LOG */
    setenv("FERRY_LOG", "debug", 1);
    memset(&sink, 0, sizeof sink);
    ctx = logging_ctx(&sink, FERRY_LOG_ERROR);
    m = test_model(ctx, "qwen3-0.6b", NULL);
    CHECK_EQ_INT(sink.count, 0);
    ferry_model_destroy(m);
    ferry_ctx_destroy(ctx);

    /* and without it FERRY_LOG=debug reaches the callback */
    ferry_ctx_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = FERRY_CTX_PARAM_LOG_FN;
    p.log_fn = sink_log;
    p.log_opaque = &sink;
    char detail[512];
    memset(&sink, 0, sizeof sink);
    ctx = NULL;
    CHECK_OK(ferry_ctx_create(&p, &ctx, detail, sizeof detail), detail);
    CHECK_EQ_INT(ferry_ctx_log_level(ctx), FERRY_LOG_DEBUG);
    m = test_model(ctx, "qwen3-0.6b", NULL);
    CHECK(sink.by_level[FERRY_LOG_DEBUG] >= 1);
    ferry_model_destroy(m);
    ferry_ctx_destroy(ctx);
    unsetenv("FERRY_LOG");
}

/* ---- FERRY_* environment ------------------------------------------------ */

static void test_env(void) {
    char detail[512];
    ferry_ctx_t *ctx = NULL;
    int from_env = -1;

    setenv("FERRY_LOG", "bogus", 1);
    memset(detail, 'x', sizeof detail);
    detail[sizeof detail - 1] = '\0';
    ctx = NULL;
    ferry_status_t st = ferry_ctx_create(NULL, &ctx, detail, sizeof detail);
    CHECK_FAILS(st, FERRY_ERR_INVALID_CONFIG, detail, "FERRY_LOG");
    CHECK(strstr(detail, "bogus") != NULL);
    CHECK(ctx == NULL);
    /* a 256-byte detail buffer is enough, per the header */
    char small[256];
    CHECK_FAILS(ferry_ctx_create(NULL, &ctx, small, sizeof small), FERRY_ERR_INVALID_CONFIG,
                small, "FERRY_LOG");

    static const struct {
        const char *value;
        ferry_log_level_t level;
    } levels[] = {{"debug", FERRY_LOG_DEBUG}, {"info", FERRY_LOG_INFO}, {"warn", FERRY_LOG_WARN},
                  {"error", FERRY_LOG_ERROR}, {"off", FERRY_LOG_OFF}};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        setenv("FERRY_LOG", levels[i].value, 1);
        ctx = NULL;
        CHECK_OK(ferry_ctx_create(NULL, &ctx, detail, sizeof detail), detail);
        CHECK_EQ_INT(ferry_ctx_log_level(ctx), levels[i].level);
        from_env = -1;
        const char *v = ferry_ctx_config_value(ctx, "FERRY_LOG", &from_env);
        CHECK(v != NULL && strcmp(v, levels[i].value) == 0);
        CHECK_EQ_INT(from_env, 1);
        ferry_ctx_destroy(ctx);
    }

    /* the environment is read once, at creation */
    setenv("FERRY_LOG", "debug", 1);
    ctx = NULL;
    CHECK_OK(ferry_ctx_create(NULL, &ctx, detail, sizeof detail), detail);
    unsetenv("FERRY_LOG");
    CHECK_EQ_INT(ferry_ctx_log_level(ctx), FERRY_LOG_DEBUG);
    CHECK(strcmp(ferry_ctx_config_value(ctx, "FERRY_LOG", NULL), "debug") == 0);
    ferry_ctx_destroy(ctx);

    /* unset: the default */
    unsetenv("FERRY_LOG");
    ctx = NULL;
    CHECK_OK(ferry_ctx_create(NULL, &ctx, detail, sizeof detail), detail);
    CHECK_EQ_INT(ferry_ctx_log_level(ctx), FERRY_LOG_WARN);
    from_env = -1;
    const char *v = ferry_ctx_config_value(ctx, "FERRY_LOG", &from_env);
    CHECK(v != NULL && strcmp(v, "warn") == 0);
    CHECK_EQ_INT(from_env, 0);
    CHECK(ferry_ctx_config_value(ctx, "FERRY_LOG", NULL) != NULL); /* from_env optional */

    /* unknown names */
    from_env = -1;
    CHECK(ferry_ctx_config_value(ctx, "FERRY_NOPE", &from_env) == NULL);
    CHECK(ferry_ctx_config_value(ctx, "", &from_env) == NULL);
    CHECK(ferry_ctx_config_value(ctx, "ferry_log", &from_env) == NULL);
    CHECK(ferry_ctx_config_value(ctx, "FERRY_LOG_", &from_env) == NULL);
    ferry_ctx_destroy(ctx);
}

static void test_config_vars(void) {
    size_t n = ferry_config_var_count();
    CHECK(n >= 2);
    CHECK(ferry_config_var(n) == NULL);
    CHECK(ferry_config_var(n + 1) == NULL);
    CHECK(ferry_config_var((size_t)-1) == NULL);

    /* with every variable unset, each value is its default */
    for (size_t i = 0; i < n; i++) unsetenv(ferry_config_var(i)->name);
    char detail[512];
    ferry_ctx_t *ctx = NULL;
    CHECK_OK(ferry_ctx_create(NULL, &ctx, detail, sizeof detail), detail);

    int saw_log = 0;
    for (size_t i = 0; i < n; i++) {
        const ferry_config_var_t *var = ferry_config_var(i);
        CHECK(var != NULL);
        CHECK(var->name && var->type && var->default_value && var->description);
        CHECK(strncmp(var->name, "FERRY_", 6) == 0 && strlen(var->name) > 6);
        CHECK(var->type[0] != '\0');
        /* every default is spelled out, except the token's: none unless set (the
         * token directory's default depends on $XDG_RUNTIME_DIR and $HOME) */
        CHECK(var->default_value[0] != '\0' || strncmp(var->name, "FERRY_TOKEN", 11) == 0);
        CHECK(var->description[0] != '\0');
        for (size_t j = 0; j < i; j++) CHECK(strcmp(var->name, ferry_config_var(j)->name) != 0);
        if (strcmp(var->name, "FERRY_LOG") == 0) {
            saw_log = 1;
            CHECK(strcmp(var->default_value, "warn") == 0);
        }
        int from_env = -1;
        const char *v = ferry_ctx_config_value(ctx, var->name, &from_env);
        CHECK(v != NULL && strcmp(v, var->default_value) == 0);
        CHECK_EQ_INT(from_env, 0);
    }
    CHECK(saw_log);
    ferry_ctx_destroy(ctx);
}

int main(void) {
    /* start from a known environment */
    unsetenv("FERRY_LOG");
    test_status();
    test_create_defaults();
    test_allocator();
    test_logging();
    test_env();
    test_config_vars();
    return 0;
}
