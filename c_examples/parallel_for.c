/*
 * parallel_for: intra-op parallelism, a matrix product split over the executor's threads.
 *
 *   a (fill) -> mm1 (a x W) -> mm2 (x W) -> mm3 (x W) -> out
 *
 * Each matmul node multiplies a 96 x 96 matrix by W with gs_ctx_parallel_for over rows: the
 * chain has no inter-op parallelism, so any speedup comes from the chunks the other thread
 * takes. The result must equal the same products computed serially here, on 2 threads and on
 * the calling thread alone; a loop that ends before it begins, or a NULL body, is refused.
 */
#include <graphsched.h>
#include <string.h>

#include "check.h"

enum { N = 96 };
static float W[N][N];

struct rows {
    const float *in;
    float *out;
};

static void multiply_rows(size_t begin, size_t end, void *user) {
    const struct rows *r = user;
    for (size_t i = begin; i < end; i++)
        for (size_t j = 0; j < N; j++) {
            float s = 0;
            for (size_t k = 0; k < N; k++) s += r->in[i * N + k] * W[k][j];
            r->out[i * N + j] = s;
        }
}

static int32_t matmul(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    struct rows r = {gs_ctx_input(ctx, 0)->data, gs_ctx_output(ctx, 0)->data};
    return gs_ctx_parallel_for(ctx, 0, N, 8, multiply_rows, &r) == GS_OK ? 0 : 1;
}

static int32_t fill(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    float *a = gs_ctx_output(ctx, 0)->data;
    for (int i = 0; i < N * N; i++) a[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    return 0;
}

/* Misuse inside a kernel: each must be refused with its status. */
static int32_t misuse(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    struct rows r = {0};
    if (gs_ctx_parallel_for(ctx, 10, 5, 1, multiply_rows, &r) != GS_ERR_INVALID_ARGUMENT) return 1;
    if (!strstr(gs_last_error_message(), "ends before it begins")) return 2;
    if (gs_ctx_parallel_for(ctx, 0, 10, 1, NULL, &r) != GS_ERR_NULL_ARGUMENT) return 3;
    memset(gs_ctx_output(ctx, 0)->data, 0, sizeof(float));
    return 0;
}

int main(void) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) W[i][j] = (float)((i + 2 * j) % 5) / 5.0f - 0.4f;
    /* The reference: three products in a row, serially. */
    static float want[N * N], cur[N * N];
    for (int i = 0; i < N * N; i++) cur[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    for (int step = 0; step < 3; step++) {
        struct rows r = {cur, want};
        multiply_rows(0, N, &r);
        memcpy(cur, want, sizeof cur);
    }

    gs_graph *g;
    CHECK_OK(gs_graph_new(&g));
    size_t bytes = sizeof(float) * N * N, one = sizeof(float);
    uint32_t prev, id;
    gs_node_desc fd = {.name = "fill", .kernel = fill, .num_outputs = 1, .output_sizes = &bytes};
    CHECK_OK(gs_graph_add_node(g, &fd, &prev));
    const char *names[] = {"mm1", "mm2", "mm3"};
    for (int k = 0; k < 3; k++) {
        gs_value in = {prev, 0};
        gs_node_desc d = {.name = names[k], .op_type = "MatMul", .kernel = matmul, .inputs = &in, .num_inputs = 1,
                          .num_outputs = 1, .output_sizes = &bytes};
        CHECK_OK(gs_graph_add_node(g, &d, &id));
        prev = id;
    }
    gs_value out = {prev, 0};
    CHECK_OK(gs_graph_mark_output(g, out));
    gs_node_desc md = {.name = "misuse", .kernel = misuse, .num_outputs = 1, .output_sizes = &one};
    uint32_t m;
    CHECK_OK(gs_graph_add_node(g, &md, &m));
    CHECK_OK(gs_graph_mark_output(g, (gs_value){m, 0}));
    CHECK_OK(gs_graph_finalize(g));

    gs_pool *pool;
    gs_executor *ex;
    CHECK_OK(gs_pool_new(NULL, &pool));
    gs_executor_config cfg = {.threads = 2};
    CHECK_OK(gs_executor_new(&cfg, &ex));
    for (int run = 0; run < 10; run++) {
        gs_run_options opts = {.executor = run % 2 ? NULL : ex};
        gs_run_result *res;
        CHECK_OK(gs_run(g, pool, &opts, &res));
        gs_tensor t;
        CHECK_OK(gs_result_output(res, out, &t));
        CHECK(memcmp(t.data, want, bytes) == 0, "run %d: the product differs from the serial one", run);
        gs_result_free(res);
    }
    printf("parallel_for: three %dx%d products split over rows, equal to the serial ones\n", N, N);
    gs_executor_free(ex);
    gs_pool_free(pool);
    gs_graph_free(g);
    return 0;
}
