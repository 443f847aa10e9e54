/* What writers and readers share: parameters, their own buffers and
 * pieces, the commit, the service connection, and the layout epoch (both
 * global layouts rebuilt from the service's LAYOUTS, and the local plan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cuda.h"
#include "common/hash.h"
#include "sync/sync_internal.h"

static const char *cfg(ferry_ctx_t *ctx, const char *name) {
    const char *v = ferry_ctx_config_value(ctx, name, NULL);
    return v ? v : "";
}

ferry_status_t sync_member_init(sync_member_t *m, ferry_ctx_t *ctx, uint32_t role, const ferry_model_t *model,
                                const ferry_sync_params_t *params) {
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->role = role;
    m->model = model;
    const char *who = role == META_ROLE_WRITER ? "writer" : role == META_ROLE_READER ? "reader" : "table";
    if (!params || (!model && role != META_ROLE_TABLE) || !params->job)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%s: model, params and params->job are required", who);
    if (params->world == 0 || params->world > META_MAX_WORLD || params->rank >= params->world)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%s: rank %u of world %u", who, params->rank, params->world);
    m->p = *params;
    uint64_t f = params->field_mask;
    if (strlen(params->job) >= sizeof m->job)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%s: job name longer than %zu", who, sizeof m->job - 1);
    snprintf(m->job, sizeof m->job, "%s", params->job);
    snprintf(m->meta_addr, sizeof m->meta_addr, "%s", (f & FERRY_SYNC_PARAM_META) && params->meta ? params->meta : cfg(ctx, "FERRY_META"));
    snprintf(m->token, sizeof m->token, "%s",
             (f & FERRY_SYNC_PARAM_TOKEN) && params->token ? params->token : cfg(ctx, "FERRY_TOKEN"));
    m->p.job = m->job;
    m->p.meta = m->meta_addr;
    m->p.token = m->token;
    if (!(f & FERRY_SYNC_PARAM_TRANSPORT)) m->p.transport = FERRY_XPORT_SHM;
    if (!(f & FERRY_SYNC_PARAM_TIMEOUT_MS) || !m->p.timeout_ms) m->p.timeout_ms = 30000;
    if (!(f & FERRY_SYNC_PARAM_LEASE_MS) || !m->p.lease_ms) m->p.lease_ms = 10000;
    if (!(f & FERRY_SYNC_PARAM_MODE)) m->p.mode = FERRY_SYNC_MODE_SYNC;
    if (!(f & FERRY_SYNC_PARAM_SLOTS)) m->p.slots = 2;
    if (!(f & FERRY_SYNC_PARAM_SERVE)) m->p.serve = role == META_ROLE_WRITER && params->rank == 0;
    if (!(f & FERRY_SYNC_PARAM_STAGED)) m->p.staged = false;
    /* GPU readers: larger batches (each ends in a wait for the GPU's checks) */
    if (!(f & FERRY_SYNC_PARAM_INFLIGHT) || !m->p.inflight_bytes)
        m->p.inflight_bytes = (f & FERRY_SYNC_PARAM_MEMORY) && params->memory == FERRY_MEM_CUDA ? 256u << 20 : 64u << 20;
    if (!(f & FERRY_SYNC_PARAM_THREADS) || !m->p.threads) m->p.threads = 1;
    if (!(f & FERRY_SYNC_PARAM_PACK_LIMIT)) m->p.pack_limit = 0;
    if (!(f & FERRY_SYNC_PARAM_DELTAS)) m->p.deltas = FERRY_SYNC_DELTAS_AUTO;
    if (m->p.deltas != FERRY_SYNC_DELTAS_AUTO && m->p.deltas != FERRY_SYNC_DELTAS_ALWAYS &&
        m->p.deltas != FERRY_SYNC_DELTAS_OFF)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%s: deltas %d is not auto, always or off", who,
                          m->p.deltas);
    if (!(f & FERRY_SYNC_PARAM_DELTA_CHAIN)) m->p.delta_chain = 8;
    if (m->p.delta_chain < 1 || m->p.delta_chain > FERRY_SYNC_DELTA_CHAIN_MAX)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%s: delta_chain %u (1..%u steps)", who, m->p.delta_chain,
                          FERRY_SYNC_DELTA_CHAIN_MAX);
    if (m->p.mode != FERRY_SYNC_MODE_SYNC && m->p.mode != FERRY_SYNC_MODE_ASYNC)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%s: mode %d is neither sync nor async", who, m->p.mode);
    if (m->p.slots < 1 || m->p.slots > 16)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%s: %u staging slots (1..16)", who, m->p.slots);
    m->mem = (f & FERRY_SYNC_PARAM_MEMORY) ? m->p.memory : FERRY_MEM_HOST;
    if (m->mem != FERRY_MEM_HOST && m->mem != FERRY_MEM_CUDA)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%s: memory %d is neither FERRY_MEM_HOST nor FERRY_MEM_CUDA",
                          who, (int)m->mem);
    ferry_status_t st = FERRY_OK;
    if (m->mem == FERRY_MEM_CUDA && (st = sync_dev_create(ctx, m->p.device, &m->dev, err)) != FERRY_OK) {
        char why[FERRY_ERR_TEXT];
        snprintf(why, sizeof why, "%s", err->text);
        return ferry_fail(err, st, "%s on CUDA device %d: %.400s", who, m->p.device, why);
    }
    st = model ? ferry_layout_create(ctx, model, m->p.world, &m->local) : FERRY_OK;
    if (st != FERRY_OK) {
        sync_dev_destroy(m->dev);
        m->dev = NULL;
        return st;
    }
    ferry_xport_params_t xpp = {.field_mask = FERRY_XPORT_PARAM_KIND | FERRY_XPORT_PARAM_TIMEOUT_MS |
                                              FERRY_XPORT_PARAM_THREADS,
                                .kind = m->p.transport,
                                .timeout_ms = m->p.timeout_ms,
                                .threads = m->p.threads};
    st = ferry_xport_create(ctx, &xpp, &m->xp);
    if (st != FERRY_OK) {
        ferry_layout_destroy(m->local);
        m->local = NULL;
        sync_dev_destroy(m->dev);
        m->dev = NULL;
    }
    return st;
}

ferry_status_t sync_member_connect(sync_member_t *m, meta_replay_fn replay, void *opaque) {
    if (m->p.serve && !m->svc) {
        ferry_meta_params_t mp = {.field_mask = FERRY_META_PARAM_LISTEN | FERRY_META_PARAM_TOKEN |
                                                FERRY_META_PARAM_LEASE_MS,
                                  .listen = m->meta_addr,
                                  .token = m->token,
                                  .lease_ms = m->p.lease_ms};
        ferry_status_t st = ferry_meta_service_create(m->ctx, &mp, &m->svc);
        if (st != FERRY_OK) return st;
        /* port 0 resolved: connect where it listens */
        snprintf(m->meta_addr, sizeof m->meta_addr, "%s", ferry_meta_service_address(m->svc));
    }
    meta_client_params_t cp = {.address = m->meta_addr,
                               .token = m->token,
                               .job = m->job,
                               .role = m->role,
                               .rank = m->p.rank,
                               .world = m->p.world,
                               .lease_ms = m->p.lease_ms,
                               .timeout_ms = m->p.timeout_ms};
    ferry_status_t st = meta_client_create(m->ctx, &cp, &m->meta, ferry_ctx_errbuf(m->ctx));
    if (st == FERRY_OK) meta_client_set_replay(m->meta, replay, opaque);
    return st;
}

void sync_member_fini(sync_member_t *m) {
    meta_client_destroy(m->meta);
    meta_layouts_free(m->epoch_layouts);
    ferry_plan_destroy(m->plan);
    sync_side_free(m->ctx, &m->side[0]);
    sync_side_free(m->ctx, &m->side[1]);
    for (size_t i = 0; i < m->nbufs; i++) {
        if (m->bufs[i].mem) ferry_xport_mem_deregister(m->bufs[i].mem);
        if (m->bufs[i].owned && m->dev) {
            sync_dev_account(m->dev, (int64_t)m->bufs[i].size); /* never counted as extra */
            sync_dev_free(m->dev, m->bufs[i].ptr, m->bufs[i].size);
        }
        else if (m->bufs[i].owned) free(m->bufs[i].ptr);
        ferry_free(m->ctx, m->bufs[i].name);
    }
    ferry_xport_destroy(m->xp);
    sync_dev_destroy(m->dev);
    ferry_free(m->ctx, m->bufs);
    ferry_free(m->ctx, m->blob);
    ferry_layout_destroy(m->local);
    ferry_meta_service_destroy(m->svc); /* last: members of other processes lose it now */
}

ferry_status_t sync_check_device(sync_member_t *m, const char *what, const char *name, const void *ptr, uint64_t size) {
    ferry_cuda_ptr_t pi;
    ferry_errbuf_t why;
    ferry_status_t cs = ferry_cuda_ptr_query(ptr, size, &pi, &why);
    if (cs != FERRY_OK)
        return ferry_fail(&m->err, cs, "%s %s: %.400s (this member's memory is CUDA device %d)", what, name, why.text,
                          sync_dev_device(m->dev));
    if (pi.device != sync_dev_device(m->dev))
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT,
                          "%s %s is on CUDA device %d, this member's memory is on device %d", what, name, pi.device,
                          sync_dev_device(m->dev));
    return FERRY_OK;
}

ferry_status_t sync_add_buffer(sync_member_t *m, const char *name, ferry_dtype_t dtype, void *ptr, uint64_t size,
                               bool owned, uint32_t *index) {
    if (m->blob) return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "buffers cannot be added after commit");
    if (!name || !ptr || size == 0)
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "buffer %s: a name, a pointer and a non-zero size are required",
                          name ? name : "(null)");
    if (ferry_grow(m->ctx, (void **)&m->bufs, sizeof *m->bufs, &m->cap_bufs, m->nbufs + 1) != 0)
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory adding buffer %s", name);
    if (m->dev) {
        ferry_status_t cs = sync_check_device(m, "buffer", name, ptr, size);
        if (cs != FERRY_OK) return cs;
    }
    uint32_t idx;
    ferry_status_t st = ferry_layout_add_buffer(m->local, m->p.rank, name, dtype, size, &idx);
    if (st != FERRY_OK) return ferry_fail(&m->err, st, "%s", ferry_layout_error(m->local));
    if (idx != m->nbufs) return ferry_fail(&m->err, FERRY_ERR_INTERNAL, "buffer index %u, expected %zu", idx, m->nbufs);
    sync_buf_t *b = &m->bufs[m->nbufs];
    memset(b, 0, sizeof *b);
    b->name = ferry_strdup(m->ctx, name);
    b->dtype = dtype;
    b->size = size;
    b->ptr = ptr;
    b->owned = owned;
    if (!b->name) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory adding buffer %s", name);
    m->nbufs++;
    if (index) *index = idx;
    return FERRY_OK;
}

ferry_status_t sync_add_piece(sync_member_t *m, const ferry_piece_t *piece) {
    if (m->blob) return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "pieces cannot be added after commit");
    if (!piece) return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "piece is NULL");
    ferry_piece_t p = *piece;
    p.rank = m->p.rank;
    ferry_status_t st = ferry_layout_add_piece(m->local, &p);
    if (st != FERRY_OK) return ferry_fail(&m->err, st, "%s", ferry_layout_error(m->local));
    return FERRY_OK;
}

ferry_status_t sync_add_layout(sync_member_t *m, const ferry_layout_t *layout, uint32_t rank, void **ptrs,
                               size_t nptrs, void *(*alloc)(sync_member_t *, const ferry_buffer_info_t *, uint32_t *,
                                                            ferry_status_t *)) {
    if (!layout) return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "layout is NULL");
    uint32_t nb = ferry_layout_buffer_count(layout), mine = 0;
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(layout, b, &bi);
        mine += bi.rank == rank;
    }
    if (nptrs != mine)
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "rank %u of the layout has %u buffers, %zu pointers given",
                          rank, mine, nptrs);
    uint32_t *map = ferry_alloc(m->ctx, (nb ? nb : 1) * sizeof *map);
    if (!map) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    ferry_status_t st = FERRY_OK;
    uint32_t k = 0;
    for (uint32_t b = 0; b < nb && st == FERRY_OK; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(layout, b, &bi);
        map[b] = UINT32_MAX;
        if (bi.rank != rank) continue;
        if (!ptrs[k]) {
            ptrs[k] = alloc(m, &bi, &map[b], &st);
        } else {
            st = sync_add_buffer(m, bi.name, bi.dtype, ptrs[k], bi.size, false, &map[b]);
        }
        k++;
    }
    size_t first, count;
    ferry_layout_rank_pieces(layout, rank, &first, &count);
    for (size_t i = first; i < first + count && st == FERRY_OK; i++) {
        ferry_piece_t p = ferry_layout_pieces(layout)[i];
        p.buffer = map[p.buffer];
        /* the member's model may be another object with the same tensors */
        ferry_tensor_info_t ti;
        ferry_model_tensor(ferry_layout_model(layout), p.tensor, &ti);
        if (!ferry_model_find(m->model, ti.name, &p.tensor)) {
            st = ferry_fail(&m->err, FERRY_ERR_NOT_FOUND, "tensor %s of the layout is not in the model", ti.name);
            break;
        }
        st = sync_add_piece(m, &p);
    }
    ferry_free(m->ctx, map);
    return st;
}

ferry_status_t sync_recommit(sync_member_t *m, ferry_errbuf_t *err) {
    meta_commit_req_t c = {.layout = {m->blob, m->blob_len}};
    if (m->epoch_layouts) {
        const meta_layouts_t *l = m->epoch_layouts;
        c.n_epoch_writers = l->n_writers;
        c.epoch_writers = l->writers;
        c.n_epoch_readers = l->n_readers;
        c.epoch_readers = l->readers;
    }
    return meta_commit(m->meta, &c, err);
}

ferry_status_t sync_commit(sync_member_t *m) {
    if (m->blob) return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "already committed");
    size_t first, count;
    ferry_layout_rank_pieces(m->local, m->p.rank, &first, &count);
    if (count == 0) return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "nothing to commit: no pieces were added");
    ferry_status_t st = sync_wire_encode(m->ctx, m->local, m->p.rank, meta_client_host(m->meta), &m->blob,
                                         &m->blob_len, &m->err);
    if (st != FERRY_OK) return st;
    st = sync_recommit(m, &m->err);
    if (st != FERRY_OK) {
        ferry_free(m->ctx, m->blob);
        m->blob = NULL;
    }
    return st;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Host labels shared by both sides: the index of each host name among all. */
static ferry_status_t label_hosts(sync_member_t *m, char **hosts[2]) {
    size_t n = (size_t)m->side[0].world + m->side[1].world;
    char **all = ferry_calloc(m->ctx, n ? n : 1, sizeof *all);
    if (!all) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    size_t k = 0;
    for (int s = 0; s < 2; s++)
        for (uint32_t r = 0; r < m->side[s].world; r++) all[k++] = hosts[s][r];
    qsort(all, n, sizeof *all, cmp_str);
    for (int s = 0; s < 2; s++) {
        m->side[s].hosts = ferry_calloc(m->ctx, m->side[s].world ? m->side[s].world : 1, sizeof(uint32_t));
        if (!m->side[s].hosts) {
            ferry_free(m->ctx, all);
            return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
        }
        for (uint32_t r = 0; r < m->side[s].world; r++) {
            char **hit = bsearch(&hosts[s][r], all, n, sizeof *all, cmp_str);
            m->side[s].hosts[r] = (uint32_t)(hit - all);
        }
    }
    ferry_free(m->ctx, all);
    return FERRY_OK;
}

ferry_status_t sync_refresh_epoch(sync_member_t *m, uint32_t wait_ms, bool *changed) {
    *changed = false;
    meta_layouts_t *l = NULL;
    ferry_status_t st = meta_get_layouts(m->meta, wait_ms, m->epoch, &l, &m->err);
    if (st != FERRY_OK) return st;
    if (l->epoch == m->epoch) {
        meta_layouts_free(l);
        return FERRY_OK;
    }
    /* the service's copy of this member must be what it committed: another
     * process with the same rank, or a confused service, must not steer our
     * plan onto other offsets */
    size_t own_n = m->role == META_ROLE_WRITER ? l->n_writers : l->n_readers;
    const meta_bytes_t *own = m->role == META_ROLE_WRITER ? l->writers : l->readers;
    if (own_n != m->p.world || own[m->p.rank].len != m->blob_len ||
        (m->blob_len && memcmp(own[m->p.rank].data, m->blob, m->blob_len) != 0)) {
        meta_layouts_free(l);
        return ferry_fail(&m->err, FERRY_ERR_MISMATCH,
                          "the service's layouts (%zu %ss) do not hold this %s's own layout as committed (rank %u of %u): "
                          "is another process running with this rank?",
                          own_n, m->role == META_ROLE_WRITER ? "writer" : "reader",
                          m->role == META_ROLE_WRITER ? "writer" : "reader", m->p.rank, m->p.world);
    }
    double t0 = ferry_mono_s();
    ferry_plan_destroy(m->plan);
    m->plan = NULL;
    sync_side_free(m->ctx, &m->side[0]);
    sync_side_free(m->ctx, &m->side[1]);
    m->epoch = 0;
    char **hosts[2] = {NULL, NULL};
    st = sync_wire_decode(m->ctx, l->writers, l->n_writers, "writer", &m->side[0], &hosts[0], &m->err);
    if (st == FERRY_OK) st = sync_wire_decode(m->ctx, l->readers, l->n_readers, "reader", &m->side[1], &hosts[1], &m->err);
    if (st == FERRY_OK) st = label_hosts(m, hosts);
    for (int s = 0; s < 2; s++) {
        for (uint32_t r = 0; hosts[s] && r < m->side[s].world; r++) ferry_free(m->ctx, hosts[s][r]);
        ferry_free(m->ctx, hosts[s]);
    }
    if (st == FERRY_OK) {
        ferry_plan_params_t pp = {.field_mask = FERRY_PLAN_PARAM_SRC_HOSTS | FERRY_PLAN_PARAM_DST_HOSTS |
                                                FERRY_PLAN_PARAM_ONLY | FERRY_PLAN_PARAM_PACK_LIMIT,
                                  .pack_limit = m->p.pack_limit,
                                  .src_hosts = m->side[0].hosts,
                                  .dst_hosts = m->side[1].hosts,
                                  .only_side = m->role == META_ROLE_WRITER ? FERRY_SIDE_TRAIN : FERRY_SIDE_INFER,
                                  .only_rank = m->p.rank};
        st = ferry_plan_build(m->ctx, m->side[0].layout, m->side[1].layout, &pp, &m->plan);
        if (st != FERRY_OK) st = ferry_fail(&m->err, st, "planning the epoch: %s", ferry_ctx_error(m->ctx));
        else st = sync_check_quant(m->plan, m->role == META_ROLE_WRITER, &m->err);
    }
    if (st == FERRY_OK) {
        m->epoch = l->epoch;
        m->plan_digest = ferry_plan_digest(m->plan);
        *changed = true;
        meta_layouts_free(m->epoch_layouts); /* kept for a restarted service */
        m->epoch_layouts = l;
        l = NULL;
        ferry_log(m->ctx, FERRY_LOG_INFO, "%s %u: epoch %016llx planned in %.1f ms (%zu ops)",
                  m->role == META_ROLE_WRITER ? "writer" : "reader", m->p.rank, (unsigned long long)m->epoch,
                  (ferry_mono_s() - t0) * 1e3, ferry_plan_op_count(m->plan));
    }
    meta_layouts_free(l);
    return st;
}

ferry_status_t sync_check_quant(const ferry_plan_t *plan, bool writer, ferry_errbuf_t *err) {
    const ferry_quant_op_t *q = ferry_plan_quant_ops(plan);
    size_t nq = ferry_plan_quant_op_count(plan);
    if (!writer) return FERRY_OK; /* a reader's QUANT ops are pack-area reads like any other */
    for (size_t i = 0; i < nq; i++) {
        uint32_t nd = q[i].box.ndim;
        if (nd < 2 || nd > 3 || q[i].src_strides[nd - 1] != 1)
            return ferry_fail(err, FERRY_ERR_UNSUPPORTED,
                              "an FP8 engine's weight (tensor %u) comes from a source piece whose rows are not "
                              "contiguous (a transposed trainer layout): quantizing from it is not built yet",
                              q[i].tensor);
    }
    return FERRY_OK;
}

void sync_regions_free(sync_regions_t *rg, ferry_ctx_t *ctx) {
    for (size_t i = 0; i < rg->ncache; i++) ferry_xport_rmem_release(rg->cache[i].rmem);
    ferry_free(ctx, rg->cache);
    ferry_free(ctx, rg->cur);
    memset(rg, 0, sizeof *rg);
}

ferry_status_t sync_regions_resolve(sync_member_t *m, sync_regions_t *rg, uint64_t incarnation,
                                    const meta_bytes_t *descs, size_t n, const char *what, uint32_t rank) {
    if (rg->incarnation != incarnation) { /* a new process: nothing of the old one is valid */
        sync_regions_free(rg, m->ctx);
        rg->incarnation = incarnation;
    }
    if (ferry_grow(m->ctx, (void **)&rg->cur, sizeof *rg->cur, &rg->cap_cur, n + 1) != 0)
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    rg->ncur = n;
    rg->clock++;
    for (size_t i = 0; i < n; i++) {
        uint64_t sum = XXH3_64bits(descs[i].data, descs[i].len);
        size_t k = 0;
        while (k < rg->ncache && rg->cache[k].desc_sum != sum) k++;
        if (k == rg->ncache) {
            if (rg->ncache >= 4 * n + 4) { /* room for a few resolves' regions */
                size_t lru = 0;
                for (size_t e = 1; e < rg->ncache; e++)
                    if (rg->cache[e].used < rg->cache[lru].used) lru = e;
                if (rg->cache[lru].used == rg->clock) /* never drop one this resolve uses */
                    return ferry_fail(&m->err, FERRY_ERR_INTERNAL, "region cache of %s %u is full", what, rank);
                ferry_xport_rmem_release(rg->cache[lru].rmem);
                rg->cache[lru] = rg->cache[--rg->ncache];
            }
            if (ferry_grow(m->ctx, (void **)&rg->cache, sizeof *rg->cache, &rg->cap_cache, rg->ncache + 1) != 0)
                return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
            ferry_xport_rmem_t *rm = NULL;
            ferry_status_t st = ferry_xport_rmem_unpack(m->xp, descs[i].data, descs[i].len, &rm);
            if (st == FERRY_ERR_INTERRUPTED) {
                /* the owner's answer may still come: shm then drops that
                 * connection, and the regions resolved through it with it;
                 * the next resolve starts afresh */
                sync_regions_free(rg, m->ctx);
                return ferry_fail(&m->err, st, "interrupted while resolving %s %u's region %zu (%s)", what, rank, i,
                                  ferry_xport_error(m->xp));
            }
            if (st != FERRY_OK)
                return ferry_fail(&m->err, st, "%s %u region %zu: %s", what, rank, i, ferry_xport_error(m->xp));
            rg->cache[k = rg->ncache++] = (sync_region_t){sum, 0, rm};
        }
        rg->cache[k].used = rg->clock;
        rg->cur[i] = rg->cache[k].rmem;
    }
    return FERRY_OK;
}

size_t sync_op_esz(const sync_member_t *m, const ferry_copy_op_t *op) {
    ferry_tensor_info_t ti;
    ferry_model_tensor(ferry_layout_model(m->side[1].layout), op->tensor, &ti);
    return ferry_dtype_size(ti.dtype);
}
