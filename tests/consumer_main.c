/*
 * The program every consumer test builds (find_package, add_subdirectory, pkg-config): the
 * header and the library it links must agree on the version, and a 2-node graph must run.
 *
 *   fill (writes 1 2 3 4) -> twice (doubles them)
 */
#include <graphsched.h>
#include <stdio.h>

enum { N = 4 };

static int32_t fill(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    int32_t *out = (int32_t *)gs_ctx_output(ctx, 0)->data;
    for (int i = 0; i < N; i++) out[i] = i + 1;
    return 0;
}

static int32_t twice(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const int32_t *in = (const int32_t *)gs_ctx_input(ctx, 0)->data;
    int32_t *out = (int32_t *)gs_ctx_output(ctx, 0)->data;
    for (int i = 0; i < N; i++) out[i] = 2 * in[i];
    return 0;
}

static int failed(const char *call, gs_status s) {
    fprintf(stderr, "%s returned %s: %s\n", call, gs_status_name(s), gs_last_error_message());
    return 1;
}
#define TRY(call)                                      \
    do {                                               \
        gs_status s_ = (call);                         \
        if (s_ != GS_OK) return failed(#call, s_);     \
    } while (0)

static int run(gs_graph *g, gs_pool *pool) {
    size_t bytes = N * sizeof(int32_t);
    uint32_t a, b;
    gs_node_desc d1 = {.name = "fill", .kernel = fill, .num_outputs = 1, .output_sizes = &bytes};
    TRY(gs_graph_add_node(g, &d1, &a));
    gs_value filled = {a, 0};
    gs_node_desc d2 = {.name = "twice", .kernel = twice, .inputs = &filled, .num_inputs = 1,
                       .num_outputs = 1, .output_sizes = &bytes};
    TRY(gs_graph_add_node(g, &d2, &b));
    gs_value doubled = {b, 0};
    TRY(gs_graph_mark_output(g, doubled));
    TRY(gs_graph_finalize(g));

    gs_run_result *r;
    gs_tensor t;
    TRY(gs_run(g, pool, NULL, &r));
    TRY(gs_result_output(r, doubled, &t));
    int ok = t.nbytes == bytes;
    for (int i = 0; ok && i < N; i++) ok = ((const int32_t *)t.data)[i] == 2 * (i + 1);
    gs_result_free(r);
    if (!ok) {
        fprintf(stderr, "twice(fill) is not 2 4 6 8\n");
        return 1;
    }
    return 0;
}

int main(void) {
    uint32_t v = gs_version_number();
    if (v != GS_VERSION_NUMBER) {
        fprintf(stderr, "gs_version_number() = %u, header says %u\n", (unsigned)v, (unsigned)GS_VERSION_NUMBER);
        return 1;
    }
    gs_graph *g;
    gs_pool *pool;
    TRY(gs_graph_new(&g));
    TRY(gs_pool_new(NULL, &pool));
    int rc = run(g, pool);
    gs_pool_free(pool);
    gs_graph_free(g);
    if (rc == 0) printf("graphsched %s: twice(fill) = 2 4 6 8\n", GS_VERSION_STRING);
    return rc;
}
