/*
 * scheduled_plan: a static plan made for a schedule, safe when the real durations disagree.
 *
 *   a1 (fill 0xA1, 64 KiB) -> a2 (waits, then checks a1's bytes) -> out_a
 *   b1 (fill 0xB1, 64 KiB) -> b2 (checks b1's bytes)              -> out_b
 *
 * The estimates say branch a is long (1 ms a node) and branch b short (10 ns). Planned for one
 * thread, the schedule runs a1, a2, then b1, b2, so b1 may take a1's 64 KiB once a2 is done: the
 * arena holds one 64 KiB block instead of two, and the plan adds one ordering constraint, a2
 * before b1. Run on two threads, b1 would otherwise start beside a1 and overwrite the bytes a2
 * reads: a2 sleeps 2 ms before its check to give it every chance. Every run must keep both
 * branches' bytes intact, on two threads and on the calling thread; then the same graph runs on
 * its own plan (GS_RUN_AUTO_PLAN) and must take one block from the pool per run.
 */
#define _POSIX_C_SOURCE 199309L /* nanosleep */
#include <graphsched.h>
#include <string.h>
#include <time.h>

#include "check.h"

enum { BYTES = 64 * 1024, RUNS = 20 };

static int32_t fill(gs_kernel_ctx *ctx, void *user) {
    const gs_tensor *out = gs_ctx_output(ctx, 0);
    memset(out->data, *(const unsigned char *)user, out->nbytes);
    return 0;
}

/* Checks that input 0 still holds the byte `user` points to, after `delay_ms`. */
static int32_t check_input(gs_kernel_ctx *ctx, const unsigned char *want, long delay_ms) {
    if (delay_ms) {
        struct timespec ts = {0, delay_ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    const gs_tensor *in = gs_ctx_input(ctx, 0);
    const unsigned char *p = in->data;
    for (size_t i = 0; i < in->nbytes; i++)
        if (p[i] != *want) {
            gs_ctx_set_error(ctx, "input overwritten while this node read it");
            return 1;
        }
    memset(gs_ctx_output(ctx, 0)->data, 1, gs_ctx_output(ctx, 0)->nbytes);
    return 0;
}
static int32_t slow_check(gs_kernel_ctx *ctx, void *user) { return check_input(ctx, user, 2); }
static int32_t quick_check(gs_kernel_ctx *ctx, void *user) { return check_input(ctx, user, 0); }

int main(void) {
    static const unsigned char A = 0xA1, B = 0xB1;
    gs_graph *g;
    gs_pool *pool;
    gs_executor *ex;
    gs_plan *plan;
    uint32_t a1, a2, b1, b2;
    size_t big = BYTES, small = 16;
    CHECK_OK(gs_graph_new(&g));
    gs_node_desc d = {.name = "a1", .kernel = fill, .user_data = (void *)&A, .num_outputs = 1,
                      .output_sizes = &big, .estimated_ns = 1000000};
    CHECK_OK(gs_graph_add_node(g, &d, &a1));
    gs_value in_a = {a1, 0};
    d = (gs_node_desc){.name = "a2", .kernel = slow_check, .user_data = (void *)&A, .inputs = &in_a,
                       .num_inputs = 1, .num_outputs = 1, .output_sizes = &small, .estimated_ns = 1000000};
    CHECK_OK(gs_graph_add_node(g, &d, &a2));
    d = (gs_node_desc){.name = "b1", .kernel = fill, .user_data = (void *)&B, .num_outputs = 1,
                       .output_sizes = &big, .estimated_ns = 10};
    CHECK_OK(gs_graph_add_node(g, &d, &b1));
    gs_value in_b = {b1, 0};
    d = (gs_node_desc){.name = "b2", .kernel = quick_check, .user_data = (void *)&B, .inputs = &in_b,
                       .num_inputs = 1, .num_outputs = 1, .output_sizes = &small, .estimated_ns = 10};
    CHECK_OK(gs_graph_add_node(g, &d, &b2));
    CHECK_OK(gs_graph_mark_output(g, (gs_value){a2, 0}));
    CHECK_OK(gs_graph_mark_output(g, (gs_value){b2, 0}));
    CHECK_OK(gs_graph_finalize(g));

    CHECK_OK(gs_plan_new_scheduled(g, 1, &plan));
    uint64_t arena, bound, constraints, makespan, free_makespan;
    uint32_t threads;
    CHECK_OK(gs_plan_bytes(plan, &arena, &bound));
    CHECK_OK(gs_plan_schedule(plan, &threads, &constraints, &makespan, &free_makespan));
    printf("scheduled plan for %u thread: arena %llu bytes (bound %llu), %llu constraint(s), "
           "simulated makespan %llu ns (%llu without the constraints)\n",
           threads, (unsigned long long)arena, (unsigned long long)bound, (unsigned long long)constraints,
           (unsigned long long)makespan, (unsigned long long)free_makespan);
    CHECK(arena == BYTES + 2 * 16, "one 64 KiB block for both branches: %llu", (unsigned long long)arena);
    CHECK(constraints == 1 && makespan == free_makespan, "a2 before b1, at no cost");

    gs_executor_config two = {.threads = 2};
    CHECK_OK(gs_executor_new(&two, &ex));
    CHECK_OK(gs_pool_new(NULL, &pool));
    for (int run = 0; run < RUNS; run++) {
        gs_run_options o = {.plan = plan, .executor = run % 2 ? NULL : ex, .flags = run % 2 ? 0 : GS_RUN_FORCE_EXECUTOR};
        gs_run_result *r;
        CHECK_OK(gs_run(g, pool, &o, &r));
        gs_result_free(r);
    }
    gs_plan_free(plan);

    /* No plan of our own: the graph makes one at its first run (scheduled for the executor's
     * threads, or sequential once its runs go to the caller) and every run takes exactly one
     * block, its arena, from the pool. */
    for (int run = 0; run < RUNS; run++) {
        gs_pool_stats before, after;
        gs_run_options o = {.executor = ex, .flags = GS_RUN_AUTO_PLAN | GS_RUN_FORCE_EXECUTOR};
        gs_run_result *r;
        CHECK_OK(gs_pool_get_stats(pool, &before));
        CHECK_OK(gs_run(g, pool, &o, &r));
        CHECK_OK(gs_pool_get_stats(pool, &after));
        CHECK(after.acquires - before.acquires == 1, "run %d took %llu blocks", run,
              (unsigned long long)(after.acquires - before.acquires));
        gs_result_free(r);
    }
    gs_pool_stats s;
    CHECK_OK(gs_pool_get_stats(pool, &s));
    CHECK(s.live_bytes == 0, "every buffer went back: %llu bytes live", (unsigned long long)s.live_bytes);
    printf("%d runs on the plan (half on 2 threads) and %d on the graph's own kept every byte\n", RUNS, RUNS);
    gs_executor_free(ex);
    gs_pool_free(pool);
    gs_graph_free(g);
    return 0;
}
