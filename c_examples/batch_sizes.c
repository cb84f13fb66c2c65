/*
 * batch_sizes: one graph whose input changes size from run to run, run at batch 0, 1, 4 and 16.
 *
 *   x (GS_SIZE_DYNAMIC: batch x 4 floats) -> dense (x W, W 4x3) -> relu -> out (batch x 3)
 *                                                                       -> total (1 float)
 *
 * dense and relu say with a size function how their output follows their input (batch x 3
 * floats); total keeps its declared 4 bytes. Each run binds x with its batch's bytes; graphsched
 * computes every size before any kernel runs, once per batch size, and runs with a size seen
 * before reuse that work and, with GS_RUN_AUTO_PLAN, their plan. Every run's results are
 * checked against the same arithmetic done here, on the calling thread and on an executor; a
 * size function that refuses a size fails the run with a message naming the node, and the graph
 * runs again afterwards. Batch 0 is an empty tensor (a detector that found nothing): bound with
 * a NULL pointer, every value but the total has 0 bytes at GS_EMPTY_DATA, and the total is 0.
 */
#include <graphsched.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { IN = 4, OUT = 3, MAX_BATCH = 16 };
static const float W[IN][OUT] = {{1, 0.5f, -1}, {2, 0, 1}, {0, -0.5f, 3}, {1, 1, 1}};

/* Rows of IN floats in, rows of OUT floats out: refuses a size that is not whole rows. */
static int32_t rows_in_to_out(const size_t *in, uint32_t n_in, size_t *out, uint32_t n_out, void *user) {
    (void)user;
    if (n_in != 1 || n_out != 1 || in[0] == GS_SIZE_DYNAMIC || in[0] % (IN * sizeof(float)) != 0) return 1;
    out[0] = in[0] / IN * OUT;
    return 0;
}

static int32_t same_size(const size_t *in, uint32_t n_in, size_t *out, uint32_t n_out, void *user) {
    (void)user;
    if (n_in != 1 || n_out != 1) return 1;
    out[0] = in[0];
    return 0;
}

static int32_t dense(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const gs_tensor *x = gs_ctx_input(ctx, 0);
    gs_tensor *y = gs_ctx_output(ctx, 0);
    size_t rows = x->nbytes / (IN * sizeof(float));
    if (y->nbytes != rows * OUT * sizeof(float)) {
        gs_ctx_set_error(ctx, "output size does not follow the input");
        return 1;
    }
    const float *xs = x->data;
    float *ys = y->data;
    for (size_t r = 0; r < rows; r++)
        for (int j = 0; j < OUT; j++) {
            float s = 0;
            for (int i = 0; i < IN; i++) s += xs[r * IN + i] * W[i][j];
            ys[r * OUT + j] = s;
        }
    return 0;
}

static int32_t relu(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const gs_tensor *x = gs_ctx_input(ctx, 0);
    const float *xs = x->data;
    float *ys = gs_ctx_output(ctx, 0)->data;
    for (size_t i = 0; i < x->nbytes / sizeof(float); i++) ys[i] = xs[i] > 0 ? xs[i] : 0;
    return 0;
}

static int32_t total(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const gs_tensor *x = gs_ctx_input(ctx, 0);
    const float *xs = x->data;
    float s = 0;
    for (size_t i = 0; i < x->nbytes / sizeof(float); i++) s += xs[i];
    *(float *)gs_ctx_output(ctx, 0)->data = s;
    return 0;
}

/* Runs the graph at `batch` and checks both outputs. */
static void run_batch(const gs_graph *g, gs_pool *pool, gs_value x, gs_value out, gs_value sum, gs_executor *ex,
                      uint32_t flags, int batch) {
    static _Alignas(16) float xs[MAX_BATCH * IN];
    for (int r = 0; r < batch; r++)
        for (int i = 0; i < IN; i++) xs[r * IN + i] = (float)((r + i) % 5) - 1.5f;
    gs_input_binding bind = {.value = x, .tensor = {.data = batch ? xs : NULL, .nbytes = (size_t)batch * IN * sizeof(float)}};
    gs_run_options opts = {.inputs = &bind, .num_inputs = 1, .executor = ex, .flags = flags};
    gs_run_result *r;
    CHECK_OK(gs_run(g, pool, &opts, &r));
    gs_tensor y, t;
    CHECK_OK(gs_result_output(r, out, &y));
    CHECK_OK(gs_result_output(r, sum, &t));
    CHECK(y.nbytes == (size_t)batch * OUT * sizeof(float), "batch %d: out has %zu bytes", batch, y.nbytes);
    CHECK(batch > 0 || y.data == GS_EMPTY_DATA, "batch 0: out's data is %p, not GS_EMPTY_DATA", y.data);
    const float *ys = y.data;
    float want_total = 0;
    for (int r = 0; r < batch; r++)
        for (int j = 0; j < OUT; j++) {
            float s = 0;
            for (int i = 0; i < IN; i++) s += xs[r * IN + i] * W[i][j];
            s = s > 0 ? s : 0;
            want_total += s;
            CHECK(ys[r * OUT + j] == s, "batch %d, row %d, column %d: %g, want %g", batch, r, j, ys[r * OUT + j], s);
        }
    float got_total = *(const float *)t.data, diff = got_total - want_total;
    CHECK(diff < 1e-4f && diff > -1e-4f, "batch %d: total %g, want %g", batch, got_total, want_total);
    gs_result_free(r);
}

int main(void) {
    gs_graph *g;
    gs_pool *pool;
    gs_executor *ex;
    gs_value x;
    uint32_t d, a, s;
    size_t row = OUT * sizeof(float), one = sizeof(float);
    CHECK_OK(gs_graph_new(&g));
    CHECK_OK(gs_graph_add_input(g, "x", GS_SIZE_DYNAMIC, &x));
    gs_node_desc dd = {.name = "dense", .op_type = "Dense", .kernel = dense, .inputs = &x, .num_inputs = 1,
                       .num_outputs = 1, .output_sizes = &row, .size_fn = rows_in_to_out};
    CHECK_OK(gs_graph_add_node(g, &dd, &d));
    gs_value dv = {d, 0};
    gs_node_desc ad = {.name = "relu", .op_type = "Relu", .kernel = relu, .inputs = &dv, .num_inputs = 1,
                       .num_outputs = 1, .output_sizes = &row, .size_fn = same_size};
    CHECK_OK(gs_graph_add_node(g, &ad, &a));
    gs_value av = {a, 0};
    gs_node_desc sd = {.name = "total", .op_type = "Sum", .kernel = total, .inputs = &av, .num_inputs = 1,
                       .num_outputs = 1, .output_sizes = &one};
    CHECK_OK(gs_graph_add_node(g, &sd, &s));
    gs_value sv = {s, 0};
    CHECK_OK(gs_graph_mark_output(g, av));
    CHECK_OK(gs_graph_mark_output(g, sv));
    CHECK_OK(gs_graph_finalize(g));
    CHECK_OK(gs_pool_new(NULL, &pool));
    gs_executor_config cfg = {.threads = 2};
    CHECK_OK(gs_executor_new(&cfg, &ex));

    static const int batches[] = {1, 4, 0, 16, 4, 0, 1, 16};
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
        run_batch(g, pool, x, av, sv, NULL, 0, batches[i]);
        run_batch(g, pool, x, av, sv, ex, 0, batches[i]);
        run_batch(g, pool, x, av, sv, NULL, GS_RUN_AUTO_PLAN, batches[i]);
        run_batch(g, pool, x, av, sv, ex, GS_RUN_AUTO_PLAN, batches[i]);
    }

    /* 6 bytes are not whole rows: dense's size function refuses them, naming the node. */
    static _Alignas(16) unsigned char odd[16];
    gs_input_binding bad = {.value = x, .tensor = {.data = odd, .nbytes = 6}};
    gs_run_options opts = {.inputs = &bad, .num_inputs = 1};
    gs_run_result *r = NULL;
    gs_status st = gs_run(g, pool, &opts, &r);
    CHECK(st == GS_ERR_KERNEL_FAILED && r == NULL, "got %s", gs_status_name(st));
    CHECK(strstr(gs_last_error_message(), "'dense'") != NULL, "message: %s", gs_last_error_message());
    run_batch(g, pool, x, av, sv, ex, 0, 4); /* and the graph runs again */

    printf("batch_sizes: batch 0, 1, 4 and 16, on the calling thread and on 2 threads, with and without plans\n");
    gs_executor_free(ex);
    gs_pool_free(pool);
    gs_graph_free(g);
    return 0;
}
