/*
 * parallel_for: intra-op parallelism, a matrix product split over the executor's threads.
 *
 *   a (fill) -> mm1 (a x W) -> mm2 (x W) -> mm3 (x W) -> mm4 (x W, nested loops) -> out
 *
 * Each matmul node multiplies a 96 x 96 matrix by W with gs_ctx_parallel_for over rows: the
 * chain has no inter-op parallelism, so any speedup comes from the chunks the other thread
 * takes. mm4 nests loops: gs_ctx_parallel_for_nested over row blocks, each block (on whichever
 * thread runs it) a gs_parallel_for of its own over columns. The result must equal the same
 * products computed serially here, on 2 threads and on the calling thread alone; a loop that
 * ends before it begins, or a NULL body, is refused.
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

/* mm4: a block of rows, then within it a loop over columns, started from the block's thread. */
struct block {
    const struct rows *r;
    size_t row_begin, row_end;
};

static void multiply_columns(const gs_parallel *p, size_t begin, size_t end, void *user) {
    (void)p;
    const struct block *b = user;
    for (size_t i = b->row_begin; i < b->row_end; i++)
        for (size_t j = begin; j < end; j++) {
            float s = 0;
            for (size_t k = 0; k < N; k++) s += b->r->in[i * N + k] * W[k][j];
            b->r->out[i * N + j] = s;
        }
}

static void row_block(const gs_parallel *p, size_t begin, size_t end, void *user) {
    struct block b = {user, begin, end};
    /* A chunk cannot fail its kernel: a refused inner loop leaves the block unwritten, which
     * the comparison with the serial product reports. */
    if (gs_parallel_for(p, 0, N, 24, multiply_columns, &b) != GS_OK) return;
}

static int32_t matmul_nested(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    struct rows r = {gs_ctx_input(ctx, 0)->data, gs_ctx_output(ctx, 0)->data};
    memset(r.out, 0, sizeof(float) * N * N);
    return gs_ctx_parallel_for_nested(ctx, 0, N, 16, row_block, &r) == GS_OK ? 0 : 1;
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
    if (gs_ctx_parallel_for_nested(ctx, 10, 5, 1, row_block, &r) != GS_ERR_INVALID_ARGUMENT) return 4;
    if (gs_parallel_for(NULL, 0, 10, 1, row_block, &r) != GS_ERR_NULL_ARGUMENT) return 5;
    memset(gs_ctx_output(ctx, 0)->data, 0, sizeof(float));
    return 0;
}

int main(void) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) W[i][j] = (float)((i + 2 * j) % 5) / 5.0f - 0.4f;
    /* The reference: four products in a row, serially. */
    static float want[N * N], cur[N * N];
    for (int i = 0; i < N * N; i++) cur[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    for (int step = 0; step < 4; step++) {
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
    const char *names[] = {"mm1", "mm2", "mm3", "mm4"};
    for (int k = 0; k < 4; k++) {
        gs_value in = {prev, 0};
        gs_node_desc d = {.name = names[k], .op_type = k < 3 ? "MatMul" : "MatMulNested",
                          .kernel = k < 3 ? matmul : matmul_nested, .inputs = &in, .num_inputs = 1,
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
    printf("parallel_for: four %dx%d products split over rows (the last over columns too, nested), equal to "
           "the serial ones\n", N, N);
    gs_executor_free(ex);
    gs_pool_free(pool);
    gs_graph_free(g);
    return 0;
}
