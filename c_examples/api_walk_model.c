/*
 * api_walk_model.c: the parts of api_walk that are not actions (see api_walk.h): the PRNG, the
 * status and message checks (the refusals of handles that are freed or of another kind included),
 * the model's bookkeeping, the kernel, the reference computation and the verification of results.
 *
 * Kernels fill each output with a pattern seeded by the node's salt, the output index and the
 * FNV-1a checksums of the inputs, so C recomputes every value (reference()) and checks each graph
 * output; they also check their ports and that gs_ctx_alloc_output refuses static outputs and
 * second allocations.
 */
#include "api_walk.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Memory no pool handed out: foreign pointers, and a binding's data when any will do. */
_Alignas(64) const unsigned char outside[256];

/* ---- PRNG and byte patterns ---- */

uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
uint64_t rnd(Walk *w) { return mix64(w->rng += 0x9e3779b97f4a7c15ull); }
uint32_t pick(Walk *w, uint32_t n) { return (uint32_t)(rnd(w) % n); }
int chance(Walk *w, int pct) { return (int)pick(w, 100) < pct; }
uint8_t fill_byte(uint64_t s, size_t i) { return (uint8_t)(mix64(s + i / 8) >> (i % 8 * 8)); }
void fill(void *p, size_t n, uint64_t s) {
    for (size_t i = 0; i < n; i++) ((uint8_t *)p)[i] = fill_byte(s, i);
}
uint64_t fnv(const void *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}
uint64_t out_seed(const Node *p, uint32_t k, const uint64_t *h) {
    uint64_t s = mix64(p->salt ^ (k + 1));
    for (uint32_t j = 0; j < p->nin; j++) s = mix64(s ^ h[j]);
    return s;
}

/* ---- checks ---- */

void fail(const Walk *w, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "api_walk: MISMATCH at seed %llu, step %d, action: %s\n  ", (unsigned long long)w->seed, w->step,
            w->what);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  gs_last_error_message(): \"%s\"\n", gs_last_error_message());
    exit(1);
}
void check(const Walk *w, int ok, const char *what) {
    if (!ok) fail(w, "check failed: %s", what);
}
void expect_status(const Walk *w, const char *call, int32_t got, int32_t want) {
    if (got != want) fail(w, "%s\n  returned %s, expected %s", call, gs_status_name(got), gs_status_name(want));
    if (got != GS_OK && !gs_last_error_message()[0]) fail(w, "%s failed but left no error message", call);
    w->tally->status[want & 31]++;
}
void expect_message(const Walk *w, int failed, const char *call) {
    if (!failed || !gs_last_error_message()[0]) fail(w, "%s: no failure reported, or no message", call);
}

/* A plan made by gs_plan_new for graph A, passed in gs_run_options.plan to run graph B, must be
 * refused with GS_ERR_INVALID_ARGUMENT and a message naming both graphs. The library says "the plan
 * was made for graph #N (K nodes, first operator 'NAME') and cannot place the values of graph #M
 * (...)"; the walk does not know the library's graph numbers, so a graph counts as named by its
 * handle (%p) or by a node name (node names carry their graph's tag, "g<tag>_"). Issue 10, defect
 * 1: at commit 32560f8 no graph was named, and some such runs returned GS_OK or PANIC. */
void check_foreign_plan(Walk *w, int32_t got, const Plan *pl, const Graph *g) {
    char a_tag[16], b_tag[16], a_ptr[32], b_ptr[32];
    const char *msg = gs_last_error_message();
    expect_status(w, "gs_run(graph B, pool, {.plan = a plan of graph A}, &result)", got, GS_ERR_INVALID_ARGUMENT);
    snprintf(a_tag, sizeof a_tag, "g%u_", pl->graph_tag), snprintf(a_ptr, sizeof a_ptr, "%p", (void *)pl->graph);
    snprintf(b_tag, sizeof b_tag, "g%u_", g->tag), snprintf(b_ptr, sizeof b_ptr, "%p", (void *)g->h);
    if (!(strstr(msg, a_tag) || strstr(msg, a_ptr)) || !(strstr(msg, b_tag) || strstr(msg, b_ptr)))
        fail(w, "foreign plan: the message must name the plan's graph (%s or %s) and the run's (%s or %s)", a_tag,
             a_ptr, b_tag, b_ptr);
}

/* Calls that take `h` as a `kind` handle, which it is not (any more): GS_ERR_INVALID_HANDLE. */
void refuse(Walk *w, int kind, void *h) {
    gs_tensor t; gs_run_stats s; gs_pool_stats ps; gs_graph_info info; uint64_t a;
    switch (kind) {
    case K_GRAPH:
        EXPECT(w, GS_ERR_INVALID_HANDLE, gs_graph_finalize(h));
        EXPECT(w, GS_ERR_INVALID_HANDLE, gs_graph_get_info(h, &info));
        EXPECT(w, GS_ERR_INVALID_HANDLE, gs_graph_add_input(h, "x", 16, NULL));
        expect_message(w, gs_graph_node_name(h, 0) == NULL, "gs_graph_node_name(not a graph, 0)");
        break;
    case K_POOL:
        EXPECT(w, GS_ERR_INVALID_HANDLE, gs_pool_acquire(h, 16, &t.data));
        EXPECT(w, GS_ERR_INVALID_HANDLE, gs_pool_get_stats(h, &ps));
        EXPECT(w, GS_ERR_INVALID_HANDLE, gs_pool_release(h, (void *)outside));
        EXPECT(w, GS_ERR_INVALID_HANDLE, gs_pool_trim(h));
        break;
    case K_PLAN: EXPECT(w, GS_ERR_INVALID_HANDLE, gs_plan_bytes(h, &a, NULL)); break;
    case K_EXEC: expect_message(w, gs_executor_threads(h) == 0, "gs_executor_threads(not an executor)"); break;
    case K_RESULT:
        EXPECT(w, GS_ERR_INVALID_HANDLE, gs_result_output(h, (gs_value){0, 0}, &t));
        EXPECT(w, GS_ERR_INVALID_HANDLE, gs_result_stats(h, &s));
        break;
    case K_TOKEN: expect_message(w, gs_cancel_token_cancel(h) == -1, "gs_cancel_token_cancel(not a token)"); break;
    }
}

/* ---- model bookkeeping ---- */

void remember(Walk *w, int kind, void *h) { w->freed[kind][w->nfreed[kind]++ % MAXF] = h; }
void *pick_freed(Walk *w, int kind) {
    int n = w->nfreed[kind] < MAXF ? w->nfreed[kind] : MAXF;
    return n ? w->freed[kind][pick(w, (uint32_t)n)] : NULL;
}
uint64_t pool_live(const Walk *w, gs_pool *pool) {
    gs_pool_stats s;
    EXPECT(w, GS_OK, gs_pool_get_stats(pool, &s));
    return s.live_bytes;
}

void make_plan(Walk *w, const Graph *g, Plan *pl, uint32_t mode) {
    uint64_t arena;
    EXPECT(w, GS_OK, gs_plan_new(g->h, mode, &pl->h));
    EXPECT(w, GS_OK, gs_plan_bytes(pl->h, &arena, NULL));
    EXPECT(w, GS_OK, gs_plan_bytes(pl->h, NULL, NULL));
    pl->graph = g->h, pl->mode = mode, pl->graph_tag = g->tag, pl->graph_n = g->n;
}

/* Releases held block b, after checking that nobody wrote into it. */
void release_block(Walk *w, Pool *p, int b) {
    for (size_t i = 0; i < p->bsz[b]; i++)
        if (((uint8_t *)p->blk[b])[i] != fill_byte(p->bseed[b], i))
            fail(w, "byte %zu of a held %zu-byte pool block changed", i, p->bsz[b]);
    EXPECT(w, GS_OK, gs_pool_release(p->h, p->blk[b]));
    if (p->nstale < MAXB) p->stale[p->nstale++] = p->blk[b];
    p->nblk--, p->blk[b] = p->blk[p->nblk], p->bsz[b] = p->bsz[p->nblk], p->bseed[b] = p->bseed[p->nblk];
}

void free_as(int kind, void *h) {
    switch (kind) {
    case K_GRAPH: gs_graph_free(h); break;
    case K_POOL: gs_pool_free(h); break;
    case K_PLAN: gs_plan_free(h); break;
    case K_EXEC: gs_executor_free(h); break;
    case K_RESULT: gs_result_free(h); break;
    case K_TOKEN: gs_cancel_token_free(h); break;
    }
}

void free_result(Walk *w, Result *res) {
    gs_result_free(res->h);
    remember(w, K_RESULT, res->h);
    for (uint32_t i = 0; i < res->n; i++) free(res->buf[i]); /* after the result, which may hand them back */
    memset(res, 0, sizeof *res);
}

/* ---- the kernel, and what its values must hold ---- */

/* Every node's kernel: checks its ports, hashes its inputs, then fills its outputs. */
int32_t kernel(gs_kernel_ctx *ctx, void *user) {
    const Node *p = user;
    char why[200] = "";
    uint64_t h[MAXIN] = {0};
    if (gs_ctx_num_inputs(ctx) != p->nin || gs_ctx_num_outputs(ctx) != p->nout || gs_ctx_input(ctx, p->nin) ||
        gs_ctx_output(ctx, p->nout))
        snprintf(why, sizeof why, "api_walk: wrong port counts, or an out-of-range port is not NULL");
    for (uint32_t j = 0; j < p->nin && !why[0]; j++) {
        const gs_tensor *t = gs_ctx_input(ctx, j);
        if (!t || t->nbytes != p->in_bytes[j] || (t->nbytes && (uintptr_t)t->data % GS_ALIGNMENT))
            snprintf(why, sizeof why, "api_walk: input %u: %zu bytes, expected %zu", j, t ? t->nbytes : 0, p->in_bytes[j]);
        else
            h[j] = fnv(t->data, t->nbytes);
    }
    if (*p->fail == (int)p->id) {
        gs_ctx_set_error(ctx, "boom");
        return 7;
    }
    for (uint32_t k = 0; k < p->nout && !why[0]; k++) {
        gs_tensor *t = gs_ctx_output(ctx, k);
        int32_t st = p->size[k] == GS_SIZE_DYNAMIC ? gs_ctx_alloc_output(ctx, k, p->bytes[k], &t) : GS_OK;
        if (st == GS_ERR_MEMORY_LIMIT) return 1;                /* the run reports the limit */
        int32_t again = gs_ctx_alloc_output(ctx, k, 16, NULL); /* static, or allocated already */
        if (st != GS_OK || again != GS_ERR_INVALID_ARGUMENT || !t || t->nbytes != p->bytes[k] ||
            (t->nbytes && (uintptr_t)t->data % GS_ALIGNMENT))
            snprintf(why, sizeof why, "api_walk: output %u: alloc %s, again %s, %zu bytes (expected %zu)", k,
                     gs_status_name(st), gs_status_name(again), t ? t->nbytes : 0, p->bytes[k]);
        else
            fill(t->data, t->nbytes, out_seed(p, k, h));
    }
    if (!why[0]) return 0;
    gs_ctx_set_error(ctx, why);
    return 99;
}

/* Whether no two operator nodes of `g` can ever be ready at once: in id order (a topological
   one) each operator reads an output of the operator before it. Given an executor, such a graph
   runs on its caller alone (its stats say 1 thread), unless under a memory limit. */
int serial(const Graph *g) {
    int before = -1;
    for (uint32_t i = 0; i < g->n; i++) {
        const Node *p = &g->node[i];
        if (p->is_input) continue;
        int reads = before < 0;
        for (uint32_t j = 0; j < p->nin; j++) reads |= p->in[j].node == (uint32_t)before;
        if (!reads) return 0;
        before = (int)i;
    }
    return 1;
}

/* What every value of `g` holds, given the caller memory bound to its inputs. */
void reference(const Graph *g, void *const *buf, uint64_t hash[MAXN][MAXOUT]) {
    uint8_t b[MAXBYTES];
    for (uint32_t i = 0; i < g->n; i++) {
        const Node *p = &g->node[i];
        uint64_t h[MAXIN] = {0};
        for (uint32_t j = 0; j < p->nin; j++) h[j] = hash[p->in[j].node][p->in[j].output];
        for (uint32_t k = 0; k < p->nout && !p->is_input; k++)
            fill(b, p->bytes[k], out_seed(p, k, h)), hash[i][k] = fnv(b, p->bytes[k]);
        if (p->is_input) hash[i][0] = fnv(buf[i], p->bytes[0]);
    }
}

void verify_result(Walk *w, const Result *res) {
    gs_tensor t;
    for (uint32_t i = 0; i < res->n; i++)
        for (uint32_t k = 0; k < res->node[i].nout; k++) {
            const Node *p = &res->node[i];
            if (!p->marked[k]) continue;
            EXPECT(w, GS_OK, gs_result_output(res->h, (gs_value){i, k}, &t));
            /* A graph input marked as an output is the result's own copy, not the caller's memory. */
            if (t.nbytes != p->bytes[k] || fnv(t.data, t.nbytes) != res->hash[i][k] ||
                (p->is_input && t.data == res->buf[i]) || (t.nbytes && (uintptr_t)t.data % GS_ALIGNMENT))
                fail(w, "graph output (%u, %u) of '%s': %zu bytes at %p, expected %zu bytes, checksum %016llx", i, k,
                     p->name, t.nbytes, t.data, p->bytes[k], (unsigned long long)res->hash[i][k]);
        }
}

int first_marked(const Result *res, gs_value *v) {
    for (uint32_t i = 0; i < res->n; i++)
        for (uint32_t k = 0; k < res->node[i].nout; k++)
            if (res->node[i].marked[k]) return *v = (gs_value){i, k}, 1;
    return 0;
}
