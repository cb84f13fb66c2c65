/*
 * Intra-op and inter-op parallelism in graphsched on the workloads of ops_common.h: heavy nodes
 * split their rows with gs_ctx_parallel_for, nodes run side by side on the executor, or both.
 * Usage: [OPS_ONLY=chain|wide|mix] ops_graphsched THREADS   (prints "graphsched WORKLOAD MODE THREADS MS" per line, the
 * median of OPS_RUNS runs after one warm-up; run by benches/c/run_ops.sh)
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <graphsched.h>

#include "ops_common.h"

static int split; /* heavy nodes split their rows (modes intra and both) */

struct rows {
    const float *in;
    float *out;
    int n;
};

static void rows_body(size_t begin, size_t end, void *user) {
    const struct rows *r = user;
    ops_matmul_rows(r->in, r->out, r->n, begin, end);
}

static int32_t node_kernel(gs_kernel_ctx *ctx, void *user) {
    const ops_node *d = user;
    if (d->pred < 0) {
        ops_fill(gs_ctx_output(ctx, 0)->data);
        return 0;
    }
    struct rows r = {gs_ctx_input(ctx, 0)->data, gs_ctx_output(ctx, 0)->data, d->n};
    if (!d->heavy) {
        ops_matmul_rows(r.in, r.out, r.n, 0, (size_t)r.n);
        return 0;
    }
    return gs_ctx_parallel_for(ctx, 0, (size_t)d->n, split ? OPS_GRAIN : (size_t)d->n, rows_body, &r);
}

static int fail(const char *what) {
    fprintf(stderr, "ops_graphsched: %s: %s\n", what, gs_last_error_message());
    return 1;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    ops_init_weights();
    static const char *names[] = {"chain", "wide", "mix"};
    static const char *modes[] = {"inter", "intra", "both"};
    gs_pool *pool;
    gs_executor *ex;
    gs_executor_config cfg = {.threads = (uint32_t)threads};
    if (gs_pool_new(NULL, &pool) || gs_executor_new(&cfg, &ex)) return fail("setup");
    const char *only = getenv("OPS_ONLY"); /* a workload's name: run only it */
    for (int w = 0; w < 3; w++) {
        if (only && strcmp(only, names[w]) != 0) continue;
        static ops_graph spec;
        ops_make(&spec, names[w]);
        gs_graph *g;
        gs_graph_new(&g);
        int has_succ[1 + OPS_WIDE + OPS_MIX_CHAIN] = {0};
        for (int i = 0; i < spec.count; i++) {
            const ops_node *d = &spec.nodes[i];
            char name[16];
            snprintf(name, sizeof name, "n%d", i);
            size_t bytes = ops_bytes(d);
            gs_value in = {(uint32_t)(d->pred < 0 ? 0 : d->pred), 0};
            gs_node_desc nd = {.name = name, .op_type = d->pred < 0 ? "Fill" : d->heavy ? "Heavy" : "Light",
                               .kernel = node_kernel, .user_data = (void *)d, .inputs = &in,
                               .num_inputs = d->pred < 0 ? 0 : 1, .num_outputs = 1, .output_sizes = &bytes};
            if (gs_graph_add_node(g, &nd, NULL)) return fail("add node");
            if (d->pred >= 0) has_succ[d->pred] = 1;
        }
        for (int i = 0; i < spec.count; i++)
            if (!has_succ[i] && gs_graph_mark_output(g, (gs_value){(uint32_t)i, 0})) return fail("output");
        if (gs_graph_finalize(g)) return fail("finalize");
        for (int m = 0; m < 3; m++) {
            if (threads == 1 && m != 2) continue; /* one thread: the modes are one */
            split = m != 0;
            gs_run_options o = {.executor = ex, .window = m == 1 ? 1 : 0};
            uint64_t samples[OPS_RUNS];
            double check = 0;
            for (int r = -1; r < OPS_RUNS; r++) {
                gs_run_result *res;
                uint64_t t0 = ops_now_ns();
                if (gs_run(g, pool, &o, &res)) return fail("run");
                if (r >= 0) samples[r] = ops_now_ns() - t0;
                if (r == -1) {
                    for (int i = 0; i < spec.count; i++) {
                        gs_tensor t;
                        if (!has_succ[i] && gs_result_output(res, (gs_value){(uint32_t)i, 0}, &t) == GS_OK)
                            check += ops_sum(t.data, spec.nodes[i].n);
                    }
                }
                gs_result_free(res);
            }
            printf("graphsched %s %s %d %.3f check %.6e\n", names[w], modes[m], threads,
                   ops_median(samples, OPS_RUNS) / 1e6, check);
            fflush(stdout);
        }
        gs_graph_free(g);
    }
    gs_executor_free(ex);
    gs_pool_free(pool);
    return 0;
}
