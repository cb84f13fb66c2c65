/*
 * pool_misuse: two kernel bugs inside pool memory, for the `asan` and `valgrind` tests. Each test
 * passes when the tool REPORTS the bug (the pool tells both tools which of its bytes a kernel may
 * touch, src/pool/sanitize.rs). Not an example: it misbehaves on purpose. Without a tool it exits 0
 * (the bad accesses land in pool memory that is still mapped).
 *
 *   pool_misuse use-after-release N   fill -> stash -> late: `stash` keeps a pointer to its N-byte
 *                                     input, `late` reads through it after the run released that
 *                                     buffer (its last reader, stash, had finished)
 *   pool_misuse write-past N          `overrun` writes one byte past its N-byte output
 *   pool_misuse release-elsewhere N   no graph: this thread takes N bytes with gs_pool_acquire,
 *                                     another thread gives them back with gs_pool_release (which
 *                                     claims the block in this thread's heap, without its lock),
 *                                     then `read_late` reads them here
 *   ... executor                      either case with a 2-thread executor (the graph is a chain,
 *                                     so the run still takes the calling thread)
 *   ... forced                        on the 2-thread executor's threads (GS_RUN_FORCE_EXECUTOR),
 *                                     whose threads park small released blocks in per-run caches
 *                                     (hidden too)
 *   ... again                         run the graph twice, the bug in the second run only: its
 *                                     blocks come from the graph's recycled arrays and reserve
 *                                     and the pool's recent lists, as the first run left them
 *
 * Choose N below 1024 for the slab tier and above for the arena tier; for write-past, N not a
 * multiple of 64, so the byte lands in the block's own slack and not in a neighbour.
 */
#include <graphsched.h>
#include <pthread.h>
#include <string.h>

#include "check.h"

static const unsigned char *stashed;
/* Whether `late` reads through the stale pointer: in the last run only. */
static int armed = 1;

static int32_t fill(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    gs_tensor *out = gs_ctx_output(ctx, 0);
    memset(out->data, 7, out->nbytes);
    return 0;
}

static int32_t stash(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    stashed = (const unsigned char *)gs_ctx_input(ctx, 0)->data; /* the bug, part 1 */
    *(unsigned char *)gs_ctx_output(ctx, 0)->data = 1;
    return 0;
}

/* Its output is 8 bytes, another size class than fill's, so the released buffer stays free. */
static int32_t late(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const volatile unsigned char *p = stashed;
    unsigned long long sum = *(const unsigned char *)gs_ctx_input(ctx, 0)->data;
    if (armed) {
        sum += p[0]; /* the bug, part 2: fill's buffer went back to the pool after stash */
    }
    memcpy(gs_ctx_output(ctx, 0)->data, &sum, sizeof sum);
    return 0;
}

static int32_t overrun(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    gs_tensor *out = gs_ctx_output(ctx, 0);
    volatile unsigned char *p = (volatile unsigned char *)out->data;
    memset(out->data, 1, out->nbytes);
    p[out->nbytes] = 1; /* the bug: one byte past the output */
    return 0;
}

static gs_pool *released_from;

static void *release_there(void *block) {
    CHECK_OK(gs_pool_release(released_from, block));
    return NULL;
}

/* The bug of release-elsewhere: a read of a block another thread released. */
__attribute__((noinline)) static unsigned char read_late(const volatile unsigned char *p) {
    return p[0];
}

static int release_elsewhere(size_t n) {
    CHECK_OK(gs_pool_new(NULL, &released_from));
    unsigned char *p;
    CHECK_OK(gs_pool_acquire(released_from, n, (void **)&p));
    memset(p, 7, n);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, release_there, p) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    unsigned char seen = read_late(p);
    printf("pool_misuse release-elsewhere %zu: no tool reported it (read %u)\n", n, seen);
    gs_pool_free(released_from);
    return 0;
}

static uint32_t add(gs_graph *g, const char *name, gs_kernel_fn kernel, const gs_value *input, size_t size) {
    uint32_t id;
    gs_node_desc d = {.name = name, .kernel = kernel, .inputs = input, .num_inputs = input ? 1 : 0,
                      .num_outputs = 1, .output_sizes = &size};
    CHECK_OK(gs_graph_add_node(g, &d, &id));
    return id;
}

int main(int argc, char **argv) {
    CHECK(argc >= 3, "usage: %s use-after-release|write-past NBYTES [executor|forced] [again]", argv[0]);
    int on_executor = 0, forced = 0, runs = 1;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "executor") == 0) {
            on_executor = 1;
        } else if (strcmp(argv[i], "forced") == 0) {
            on_executor = forced = 1;
        } else if (strcmp(argv[i], "again") == 0) {
            runs = 2;
        } else {
            CHECK(0, "unknown option '%s'", argv[i]);
        }
    }
    size_t n = (size_t)strtoull(argv[2], NULL, 10);
    CHECK(n > 0, "NBYTES must be positive");
    if (strcmp(argv[1], "release-elsewhere") == 0) {
        return release_elsewhere(n);
    }
    gs_graph *g;
    CHECK_OK(gs_graph_new(&g));
    uint32_t last;
    if (strcmp(argv[1], "use-after-release") == 0) {
        gs_value a = {add(g, "fill", fill, NULL, n), 0};
        gs_value b = {add(g, "stash", stash, &a, 16), 0};
        last = add(g, "late", late, &b, 8);
    } else if (strcmp(argv[1], "write-past") == 0) {
        last = add(g, "overrun", overrun, NULL, n);
    } else {
        CHECK(0, "unknown case '%s'", argv[1]);
    }
    CHECK_OK(gs_graph_mark_output(g, (gs_value){last, 0}));
    CHECK_OK(gs_graph_finalize(g));
    gs_pool *pool;
    gs_run_result *r = NULL;
    CHECK_OK(gs_pool_new(NULL, &pool));
    gs_executor *ex = NULL;
    if (on_executor) {
        CHECK_OK(gs_executor_new(&(gs_executor_config){.threads = 2}, &ex));
    }
    /* Without an executor: on this thread, in order. A chain runs there even with an executor,
     * unless GS_RUN_FORCE_EXECUTOR is set. */
    gs_run_options options = {.executor = ex, .flags = forced ? GS_RUN_FORCE_EXECUTOR : 0};
    for (int i = 0; i < runs; i++) {
        gs_result_free(r);
        armed = i == runs - 1;
        CHECK_OK(gs_run(g, pool, &options, &r));
    }
    printf("pool_misuse %s %zu%s%s: no tool reported it\n", argv[1], n,
           ex ? (forced ? " forced" : " executor") : "", runs > 1 ? " again" : "");
    gs_result_free(r);
    gs_executor_free(ex);
    gs_pool_free(pool);
    gs_graph_free(g);
    return 0;
}
