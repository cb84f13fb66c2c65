/*
 * multi_output: a node with two outputs and a node whose output size is known only at run time.
 *
 *   x[8] -> split -> lo[4] -> positives (dynamic: keeps x > 0) -+-> stats [count, sum(pos), sum(hi)]
 *                 -> hi[4] -----------------------------------+
 *
 * "positives" allocates its output with gs_ctx_alloc_output once it knows the count, and
 * describes it (ndim 1, dims[0] = count, F32). "stats" reads the count from those dims, so the
 * shape must reach the consumer; the result must show it too. The second run keeps nothing.
 */
#include <graphsched.h>
#include <string.h>

#include "check.h"

enum { N = 8, HALF = N / 2 };

static int fail(gs_kernel_ctx *ctx, const char *why) {
    gs_ctx_set_error(ctx, why);
    return 1;
}

static void set_vector(gs_tensor *t, int64_t n) {
    t->dtype = GS_DTYPE_F32;
    t->ndim = 1;
    t->dims[0] = n;
    t->strides[0] = 1;
}

/* Split: output 0 gets the first half of the input, output 1 the second. */
static int32_t split_kernel(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const gs_tensor *in = gs_ctx_input(ctx, 0);
    gs_tensor *lo = gs_ctx_output(ctx, 0), *hi = gs_ctx_output(ctx, 1);
    if (!in || !lo || !hi || in->nbytes != lo->nbytes + hi->nbytes) return fail(ctx, "halves do not add up");
    memcpy(lo->data, in->data, lo->nbytes);
    memcpy(hi->data, (const char *)in->data + lo->nbytes, hi->nbytes);
    set_vector(lo, (int64_t)(lo->nbytes / sizeof(float)));
    set_vector(hi, (int64_t)(hi->nbytes / sizeof(float)));
    return 0;
}

/* Keeps the positive values; the output is allocated with the real count. */
static int32_t positives_kernel(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const gs_tensor *in = gs_ctx_input(ctx, 0);
    if (!in) return fail(ctx, "no input");
    const float *x = (const float *)in->data;
    size_t n = in->nbytes / sizeof(float), count = 0;
    for (size_t i = 0; i < n; i++) count += x[i] > 0.0f;

    /* count may be 0: an empty dynamic output is allowed and takes nothing from the pool. */
    gs_tensor *out;
    if (gs_ctx_alloc_output(ctx, 0, count * sizeof(float), &out) != GS_OK)
        return fail(ctx, gs_last_error_message());
    float *y = (float *)out->data;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] > 0.0f) y[k++] = x[i];
    set_vector(out, (int64_t)count);
    return 0;
}

/* Reads the count from the dynamic input's shape, not from its byte size alone. */
static int32_t stats_kernel(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const gs_tensor *pos = gs_ctx_input(ctx, 0), *hi = gs_ctx_input(ctx, 1);
    gs_tensor *out = gs_ctx_output(ctx, 0);
    if (!pos || !hi || !out) return fail(ctx, "missing input or output");
    if (pos->ndim != 1 || pos->dtype != GS_DTYPE_F32 || pos->dims[0] * (int64_t)sizeof(float) != (int64_t)pos->nbytes)
        return fail(ctx, "the dynamic input's shape does not match its bytes");
    const float *p = (const float *)pos->data, *h = (const float *)hi->data;
    float sum_pos = 0.0f, sum_hi = 0.0f;
    for (int64_t i = 0; i < pos->dims[0]; i++) sum_pos += p[i];
    for (size_t i = 0; i < hi->nbytes / sizeof(float); i++) sum_hi += h[i];
    float *o = (float *)out->data;
    o[0] = (float)pos->dims[0];
    o[1] = sum_pos;
    o[2] = sum_hi;
    set_vector(out, 3);
    return 0;
}

static void check_floats(const char *what, const gs_tensor *t, const float *want, size_t n) {
    CHECK(t->nbytes == n * sizeof(float), "%s: %zu bytes, expected %zu", what, t->nbytes, n * sizeof(float));
    CHECK(t->ndim == 1 && t->dims[0] == (int64_t)n && t->dtype == GS_DTYPE_F32,
          "%s: ndim %d dims[0] %lld dtype %d, expected a 1-D F32 vector of %zu", what, (int)t->ndim,
          (long long)t->dims[0], (int)t->dtype, n);
    for (size_t i = 0; i < n; i++)
        CHECK(((const float *)t->data)[i] == want[i], "%s[%zu] = %g, expected %g", what, i,
              ((const float *)t->data)[i], want[i]);
}

int main(void) {
    gs_graph *g;
    CHECK_OK(gs_graph_new(&g));
    gs_value x;
    CHECK_OK(gs_graph_add_input(g, "x", N * sizeof(float), &x));

    /* Compound literals with designated initializers zero every field not named. */
    uint32_t split, positives, stats;
    size_t halves[2] = {HALF * sizeof(float), HALF * sizeof(float)};
    gs_node_desc d = {.name = "split", .op_type = "Split", .kernel = split_kernel,
                      .inputs = &x, .num_inputs = 1, .num_outputs = 2, .output_sizes = halves};
    CHECK_OK(gs_graph_add_node(g, &d, &split));
    gs_value lo = {split, 0}, hi = {split, 1};

    size_t dynamic = GS_SIZE_DYNAMIC;
    d = (gs_node_desc){.name = "positives", .op_type = "Filter", .kernel = positives_kernel,
                       .inputs = &lo, .num_inputs = 1, .num_outputs = 1, .output_sizes = &dynamic};
    CHECK_OK(gs_graph_add_node(g, &d, &positives));
    gs_value pos = {positives, 0};

    size_t three = 3 * sizeof(float);
    gs_value stats_in[2] = {pos, hi};
    d = (gs_node_desc){.name = "stats", .op_type = "Stats", .kernel = stats_kernel,
                       .inputs = stats_in, .num_inputs = 2, .num_outputs = 1, .output_sizes = &three};
    CHECK_OK(gs_graph_add_node(g, &d, &stats));
    gs_value st = {stats, 0};

    CHECK_OK(gs_graph_mark_output(g, lo));
    CHECK_OK(gs_graph_mark_output(g, hi));
    CHECK_OK(gs_graph_mark_output(g, pos));
    CHECK_OK(gs_graph_mark_output(g, st));
    CHECK_OK(gs_graph_finalize(g));

    gs_pool *pool;
    CHECK_OK(gs_pool_new(NULL, &pool));
    static const float inputs[2][N] = {
        {3, -1, 0, 5, -2, 7, 1, -4}, /* positives {3, 5} */
        {-3, -1, 0, -5, 2, 2, 2, 2}, /* no positives: an empty dynamic output */
    };
    _Alignas(16) static float xs[N];
    for (int run = 0; run < 2; run++) {
        memcpy(xs, inputs[run], sizeof xs);
        float want_pos[HALF] = {0}, want_stats[3] = {0, 0, 0};
        size_t count = 0;
        for (int i = 0; i < HALF; i++)
            if (xs[i] > 0.0f) {
                want_pos[count++] = xs[i];
                want_stats[1] += xs[i];
            }
        for (int i = HALF; i < N; i++) want_stats[2] += xs[i];
        want_stats[0] = (float)count;

        gs_input_binding b = {.value = x, .tensor = {.data = xs, .nbytes = sizeof xs}};
        gs_run_options opts = {.inputs = &b, .num_inputs = 1};
        gs_run_result *r;
        CHECK_OK(gs_run(g, pool, &opts, &r));

        gs_tensor t;
        CHECK_OK(gs_result_output(r, lo, &t));
        check_floats("split:0", &t, xs, HALF);
        CHECK_OK(gs_result_output(r, hi, &t));
        check_floats("split:1", &t, xs + HALF, HALF);
        CHECK_OK(gs_result_output(r, pos, &t));
        check_floats("positives", &t, want_pos, count);
        CHECK_OK(gs_result_output(r, st, &t));
        check_floats("stats", &t, want_stats, 3);
        printf("run %d: %zu positive value(s) in the first half, sum %g; second half sums to %g\n", run,
               count, want_stats[1], want_stats[2]);
        gs_result_free(r);

        gs_pool_stats ps;
        CHECK_OK(gs_pool_get_stats(pool, &ps));
        CHECK(ps.live_bytes == 0, "%llu live bytes after gs_result_free", (unsigned long long)ps.live_bytes);
    }
    gs_pool_free(pool);
    gs_graph_free(g);
    printf("multi_output: OK\n");
    return 0;
}
