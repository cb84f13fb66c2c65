/*
 * pipeline: a small float pipeline with real arithmetic kernels.
 *
 *            +-> scale (x*2) -> add_bias (+1) -+
 *   x[N] ----+                                 +-> sum (a+b) -> reduce (total)
 *            +-> square (x*x) -----------------+
 *
 * Graph outputs: "sum" (N floats) and "reduce" (1 float). The graph runs several times on one
 * pool; every output is compared with values computed here, and the pool must hold no live
 * bytes after each result is freed and make no new system allocation after the first run.
 */
#include <graphsched.h>
#include <string.h>

#include "check.h"

enum { N = 8, RUNS = 4 };

static int fail(gs_kernel_ctx *ctx, const char *why) {
    gs_ctx_set_error(ctx, why);
    return 1;
}

/* Describes output 0 as a 1-D float array of n elements. */
static void set_shape(gs_tensor *out, int64_t n) {
    out->dtype = GS_DTYPE_F32;
    out->ndim = 1;
    out->dims[0] = n;
    out->strides[0] = 1;
}

/* out = in * mul + add; user_data points at the parameters ("scale" and "add_bias" share it). */
typedef struct {
    float mul, add;
} affine_params;

static int32_t affine_kernel(gs_kernel_ctx *ctx, void *user) {
    const affine_params *p = (const affine_params *)user;
    const gs_tensor *in = gs_ctx_input(ctx, 0);
    gs_tensor *out = gs_ctx_output(ctx, 0);
    if (!in || !out || in->nbytes != out->nbytes) return fail(ctx, "input and output sizes differ");
    const float *x = (const float *)in->data;
    float *y = (float *)out->data;
    size_t n = in->nbytes / sizeof(float);
    for (size_t i = 0; i < n; i++) y[i] = x[i] * p->mul + p->add;
    set_shape(out, (int64_t)n);
    return 0;
}

static int32_t square_kernel(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const gs_tensor *in = gs_ctx_input(ctx, 0);
    gs_tensor *out = gs_ctx_output(ctx, 0);
    if (!in || !out || in->nbytes != out->nbytes) return fail(ctx, "input and output sizes differ");
    const float *x = (const float *)in->data;
    float *y = (float *)out->data;
    size_t n = in->nbytes / sizeof(float);
    for (size_t i = 0; i < n; i++) y[i] = x[i] * x[i];
    set_shape(out, (int64_t)n);
    return 0;
}

static int32_t add_kernel(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const gs_tensor *a = gs_ctx_input(ctx, 0), *b = gs_ctx_input(ctx, 1);
    gs_tensor *out = gs_ctx_output(ctx, 0);
    if (!a || !b || !out || a->nbytes != b->nbytes || a->nbytes != out->nbytes)
        return fail(ctx, "operands of different sizes");
    const float *x = (const float *)a->data, *y = (const float *)b->data;
    float *z = (float *)out->data;
    size_t n = a->nbytes / sizeof(float);
    for (size_t i = 0; i < n; i++) z[i] = x[i] + y[i];
    set_shape(out, (int64_t)n);
    return 0;
}

static int32_t reduce_sum_kernel(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const gs_tensor *in = gs_ctx_input(ctx, 0);
    gs_tensor *out = gs_ctx_output(ctx, 0);
    if (!in || !out || out->nbytes != sizeof(float)) return fail(ctx, "output must hold one float");
    const float *x = (const float *)in->data;
    float total = 0.0f;
    for (size_t i = 0; i < in->nbytes / sizeof(float); i++) total += x[i];
    *(float *)out->data = total;
    set_shape(out, 1);
    return 0;
}

/* Adds a one-output node reading `num_inputs` values; returns its id. */
static uint32_t add_node(gs_graph *g, const char *name, const char *op, gs_kernel_fn k, void *user,
                         const gs_value *inputs, uint32_t num_inputs, size_t out_bytes,
                         uint64_t estimated_ns) {
    gs_node_desc d = {.name = name, .op_type = op, .kernel = k, .user_data = user,
                      .inputs = inputs, .num_inputs = num_inputs,
                      .num_outputs = 1, .output_sizes = &out_bytes, .estimated_ns = estimated_ns};
    uint32_t id;
    CHECK_OK(gs_graph_add_node(g, &d, &id));
    return id;
}

int main(void) {
    static const affine_params scale = {2.0f, 0.0f}, bias = {1.0f, 1.0f};
    const size_t vec = N * sizeof(float);

    gs_graph *g;
    CHECK_OK(gs_graph_new(&g));
    gs_value x;
    CHECK_OK(gs_graph_add_input(g, "x", vec, &x));
    /* Estimates make "square" the slow branch, so the critical path is known in advance. */
    gs_value v_scale = {add_node(g, "scale", "Mul", affine_kernel, (void *)&scale, &x, 1, vec, 100), 0};
    gs_value v_bias = {add_node(g, "add_bias", "Add", affine_kernel, (void *)&bias, &v_scale, 1, vec, 100), 0};
    gs_value v_sq = {add_node(g, "square", "Mul", square_kernel, NULL, &x, 1, vec, 500), 0};
    gs_value both[2] = {v_bias, v_sq};
    gs_value v_sum = {add_node(g, "sum", "Add", add_kernel, NULL, both, 2, vec, 100), 0};
    gs_value v_total = {add_node(g, "reduce", "ReduceSum", reduce_sum_kernel, NULL, &v_sum, 1, sizeof(float), 100), 0};
    CHECK_OK(gs_graph_mark_output(g, v_sum));
    CHECK_OK(gs_graph_mark_output(g, v_total));
    CHECK_OK(gs_graph_finalize(g));

    /* Static figures, checked against the shape drawn above. */
    gs_graph_info info;
    CHECK_OK(gs_graph_get_info(g, &info));
    CHECK(info.num_nodes == 6 && info.num_inputs == 1 && info.num_outputs == 2 &&
              info.num_values == 6 && info.num_edges == 6,
          "unexpected counts: %llu nodes, %llu inputs, %llu outputs, %llu values, %llu edges",
          (unsigned long long)info.num_nodes, (unsigned long long)info.num_inputs,
          (unsigned long long)info.num_outputs, (unsigned long long)info.num_values,
          (unsigned long long)info.num_edges);
    CHECK(info.critical_path_ns == 700 && info.total_work_ns == 900,
          "critical path %llu ns, total work %llu ns; expected 700 and 900",
          (unsigned long long)info.critical_path_ns, (unsigned long long)info.total_work_ns);
    CHECK(info.static_bytes == 5 * vec + sizeof(float), "static_bytes %llu",
          (unsigned long long)info.static_bytes);

    size_t path_len = 0;
    CHECK_OK(gs_graph_critical_path(g, NULL, 0, &path_len));
    uint32_t path[8];
    CHECK(path_len == 3 && path_len == info.critical_path_nodes, "critical path has %zu nodes", path_len);
    CHECK_OK(gs_graph_critical_path(g, path, 8, &path_len));
    static const char *const expected_path[3] = {"square", "sum", "reduce"};

    printf("graphsched %s pipeline: %llu nodes (%llu input), %llu edges, %llu outputs\n",
           GS_VERSION_STRING, (unsigned long long)info.num_nodes, (unsigned long long)info.num_inputs,
           (unsigned long long)info.num_edges, (unsigned long long)info.num_outputs);
    printf("  static bytes %llu, single-node lower bound %llu bytes\n",
           (unsigned long long)info.static_bytes, (unsigned long long)info.node_lower_bound_bytes);
    printf("  critical path %llu ns of %llu ns total work:", (unsigned long long)info.critical_path_ns,
           (unsigned long long)info.total_work_ns);
    for (size_t i = 0; i < path_len; i++) {
        const char *name = gs_graph_node_name(g, path[i]);
        CHECK(name && strcmp(name, expected_path[i]) == 0, "critical path node %zu is '%s', expected '%s'",
              i, name ? name : "(null)", expected_path[i]);
        printf("%s %s", i ? " ->" : "", name);
    }
    printf("\n");

    gs_pool *pool;
    CHECK_OK(gs_pool_new(NULL, &pool));
    _Alignas(16) static float xs[N];
    uint64_t os_allocs_after_first = 0;
    for (int run = 0; run < RUNS; run++) {
        /* Small integers keep every float result exact. */
        float want_sum[N], want_total = 0.0f;
        for (int i = 0; i < N; i++) {
            xs[i] = (float)(i - 3 + run);
            want_sum[i] = (xs[i] * 2.0f + 1.0f) + xs[i] * xs[i];
            want_total += want_sum[i];
        }
        if (run == 0) CHECK(want_total == 60.0f, "hand check: sum of (x+1)^2 for x=-3..4 is 60");

        gs_input_binding binding = {
            .value = x,
            .tensor = {.data = xs, .nbytes = sizeof xs, .dtype = GS_DTYPE_F32, .ndim = 1,
                       .dims = {N}, .strides = {1}},
        };
        gs_run_options opts = {.inputs = &binding, .num_inputs = 1};

        gs_run_result *result;
        CHECK_OK(gs_run(g, pool, &opts, &result));
        gs_tensor t_sum, t_total;
        CHECK_OK(gs_result_output(result, v_sum, &t_sum));
        CHECK_OK(gs_result_output(result, v_total, &t_total));
        CHECK(t_sum.nbytes == vec && t_sum.ndim == 1 && t_sum.dims[0] == N && t_sum.dtype == GS_DTYPE_F32,
              "run %d: 'sum' has %zu bytes, ndim %d, dims[0] %lld", run, t_sum.nbytes, (int)t_sum.ndim,
              (long long)t_sum.dims[0]);
        const float *got = (const float *)t_sum.data;
        for (int i = 0; i < N; i++)
            CHECK(got[i] == want_sum[i], "run %d: sum[%d] = %g, expected %g", run, i, got[i], want_sum[i]);
        float total = *(const float *)t_total.data;
        CHECK(t_total.nbytes == sizeof(float) && total == want_total, "run %d: total = %g, expected %g",
              run, total, want_total);

        gs_run_stats rs;
        CHECK_OK(gs_result_stats(result, &rs));
        CHECK(rs.nodes_run == 5, "run %d ran %llu nodes", run, (unsigned long long)rs.nodes_run);
        if (run > 0) CHECK(rs.os_allocs == 0, "run %d made %llu system allocations", run, (unsigned long long)rs.os_allocs);
        gs_result_free(result);

        gs_pool_stats ps;
        CHECK_OK(gs_pool_get_stats(pool, &ps));
        CHECK(ps.live_bytes == 0, "run %d: %llu live bytes after gs_result_free", run,
              (unsigned long long)ps.live_bytes);
        if (run == 0) os_allocs_after_first = ps.os_allocs;
        CHECK(ps.os_allocs == os_allocs_after_first, "run %d: os_allocs grew from %llu to %llu", run,
              (unsigned long long)os_allocs_after_first, (unsigned long long)ps.os_allocs);
        printf("  run %d: total %g, peak %llu bytes, %llu buffers, %llu new system allocations\n", run,
               total, (unsigned long long)rs.peak_live_bytes, (unsigned long long)rs.acquires,
               (unsigned long long)rs.os_allocs);
    }

    gs_pool_stats ps;
    CHECK_OK(gs_pool_get_stats(pool, &ps));
    printf("  pool: %llu acquires, %llu cache hits, %llu system allocations, %llu bytes reserved\n",
           (unsigned long long)ps.acquires, (unsigned long long)ps.cache_hits,
           (unsigned long long)ps.os_allocs, (unsigned long long)ps.reserved_bytes);
    gs_pool_free(pool);
    gs_graph_free(g);
    printf("pipeline: OK\n");
    return 0;
}
