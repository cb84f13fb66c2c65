/*
 * parallel: one float graph with three independent branches, run on the calling thread and on
 * an executor, under both scheduling policies, a window, memory limits and a failing kernel,
 * plus the simulator's view of the same graph. Every run's outputs are checked against values
 * computed here, and the pool must hold no live bytes once each result is freed.
 *
 *           +-> a1 (*2) -> a2 (+3) -> a3 (relu) -> a4 (*0.5) -> a5 (-1) ------------+
 *           |   (slow: 1000 ns each, the critical path)                              |
 *   x[N] ---+-> b1 (+1) -> b2 (square) -> b3 (*3) -> b4 (-10) -> b5 (*0.25) --------+-> join (a5+b5+c5)
 *           |   (200 ns each)                                                        |
 *           +-> c1 (widen to 4N: x,2x,3x,4x) -> c2 (sum of quarters) -> c3 (+5)      |
 *               -> c4 (negate) -> c5 (*2) ---------------------------------------------+
 *               (100 ns each; c1's output is 4x the size of every other value)
 *
 * By hand, per element:  a5 = max(0, 2x+3)/2 - 1
 *                        b5 = (3(x+1)^2 - 10)/4
 *                        c5 = -2(10x + 5) = -20x - 10
 * e.g. x = 0: a5 = 0.5, b5 = -1.75, c5 = -10, join = -11.25;
 *      x = 1: a5 = 1.5, b5 = 0.5,   c5 = -30, join = -28.
 * The inputs are small integers, so every intermediate value is exact in float and the checks
 * compare for equality. Graph outputs: "join" and "a5".
 *
 * Estimates: work = 5*1000 + 5*200 + 5*100 + 100 = 6600 ns; critical path = a1..a5, join =
 * 5100 ns. On 2 threads the critical-path policy can hide both short branches behind branch a.
 */
#include <graphsched.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"

enum { N = 1024, RUNS = 50, WIDEN = 4 };

#define VEC_BYTES ((size_t)N * sizeof(float))
/* The executor's runs are forced onto its threads: once measured, these kernels are too short
 * to pay for them, and graphsched would run the graph on its caller alone (runs under a memory
 * limit go to the threads anyway). */
#define FORCED GS_RUN_FORCE_EXECUTOR

/* Small helpers instead of <math.h>, so the example needs no libm. */
static float max0(float v) { return v > 0.0f ? v : 0.0f; }
static double absd(double v) { return v < 0 ? -v : v; }

/* ---- what the kernels observe: threads used and kernels running at once -------------------- */

enum { MAX_SEEN_THREADS = 16 };
static _Thread_local char thread_tag;                 /* its address identifies a thread */
static atomic_uintptr_t seen_threads[MAX_SEEN_THREADS]; /* distinct threads that ran kernels */
static atomic_int in_flight, max_in_flight;

static void reset_observations(void) {
    for (int i = 0; i < MAX_SEEN_THREADS; i++) atomic_store(&seen_threads[i], 0);
    atomic_store(&in_flight, 0);
    atomic_store(&max_in_flight, 0);
}

static int threads_seen(void) {
    int n = 0;
    while (n < MAX_SEEN_THREADS && atomic_load(&seen_threads[n])) n++;
    return n;
}

static void kernel_enter(void) {
    uintptr_t me = (uintptr_t)&thread_tag;
    for (int i = 0; i < MAX_SEEN_THREADS; i++) {
        uintptr_t cur = 0;
        if (atomic_compare_exchange_strong(&seen_threads[i], &cur, me) || cur == me) break;
    }
    int now = atomic_fetch_add(&in_flight, 1) + 1;
    int max = atomic_load(&max_in_flight);
    while (now > max && !atomic_compare_exchange_weak(&max_in_flight, &max, now)) {
    }
}

static void kernel_leave(void) { atomic_fetch_sub(&in_flight, 1); }

/* ---- kernels ---------------------------------------------------------------------------- */

typedef enum { OP_MUL, OP_ADD, OP_RELU, OP_SQUARE, OP_NEG } step_kind;

typedef struct {
    step_kind kind;
    float c;
    const int *fail; /* if non-NULL and *fail is set, the kernel fails */
} step_params;

static int32_t fail_with(gs_kernel_ctx *ctx, const char *why) {
    gs_ctx_set_error(ctx, why);
    return 1;
}

static void set_shape(gs_tensor *out, int64_t n) {
    out->dtype = GS_DTYPE_F32;
    out->ndim = 1;
    out->dims[0] = n;
    out->strides[0] = 1;
}

/* One elementwise step: y = f(x). */
static int32_t step_kernel_body(gs_kernel_ctx *ctx, void *user) {
    const step_params *p = (const step_params *)user;
    if (p->fail && *p->fail) return fail_with(ctx, "injected failure");
    const gs_tensor *in = gs_ctx_input(ctx, 0);
    gs_tensor *out = gs_ctx_output(ctx, 0);
    if (!in || !out || in->nbytes != out->nbytes) return fail_with(ctx, "input and output sizes differ");
    const float *x = (const float *)in->data;
    float *y = (float *)out->data;
    size_t n = in->nbytes / sizeof(float);
    for (size_t i = 0; i < n; i++) {
        switch (p->kind) {
        case OP_MUL: y[i] = x[i] * p->c; break;
        case OP_ADD: y[i] = x[i] + p->c; break;
        case OP_RELU: y[i] = x[i] > 0.0f ? x[i] : 0.0f; break;
        case OP_SQUARE: y[i] = x[i] * x[i]; break;
        case OP_NEG: y[i] = -x[i]; break;
        }
    }
    set_shape(out, (int64_t)n);
    return 0;
}

/* out (WIDEN*n) = [1x, 2x, 3x, 4x]. */
static int32_t widen_kernel_body(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const gs_tensor *in = gs_ctx_input(ctx, 0);
    gs_tensor *out = gs_ctx_output(ctx, 0);
    if (!in || !out || out->nbytes != WIDEN * in->nbytes) return fail_with(ctx, "output must be 4x the input");
    const float *x = (const float *)in->data;
    float *y = (float *)out->data;
    size_t n = in->nbytes / sizeof(float);
    for (size_t k = 0; k < WIDEN; k++)
        for (size_t i = 0; i < n; i++) y[k * n + i] = (float)(k + 1) * x[i];
    out->dtype = GS_DTYPE_F32;
    out->ndim = 2;
    out->dims[0] = WIDEN;
    out->dims[1] = (int64_t)n;
    out->strides[0] = (int64_t)n;
    out->strides[1] = 1;
    return 0;
}

/* out (n) = sum over the WIDEN quarters of the input. */
static int32_t sum_quarters_kernel_body(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const gs_tensor *in = gs_ctx_input(ctx, 0);
    gs_tensor *out = gs_ctx_output(ctx, 0);
    if (!in || !out || in->nbytes != WIDEN * out->nbytes) return fail_with(ctx, "input must be 4x the output");
    const float *x = (const float *)in->data;
    float *y = (float *)out->data;
    size_t n = out->nbytes / sizeof(float);
    for (size_t i = 0; i < n; i++) {
        float s = 0.0f;
        for (size_t k = 0; k < WIDEN; k++) s += x[k * n + i];
        y[i] = s;
    }
    set_shape(out, (int64_t)n);
    return 0;
}

/* out = sum of all inputs (same sizes). */
static int32_t join_kernel_body(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    gs_tensor *out = gs_ctx_output(ctx, 0);
    uint32_t k = gs_ctx_num_inputs(ctx);
    if (!out || k == 0) return fail_with(ctx, "join needs inputs");
    float *y = (float *)out->data;
    size_t n = out->nbytes / sizeof(float);
    for (size_t i = 0; i < n; i++) y[i] = 0.0f;
    for (uint32_t j = 0; j < k; j++) {
        const gs_tensor *in = gs_ctx_input(ctx, j);
        if (!in || in->nbytes != out->nbytes) return fail_with(ctx, "operands of different sizes");
        const float *x = (const float *)in->data;
        for (size_t i = 0; i < n; i++) y[i] += x[i];
    }
    set_shape(out, (int64_t)n);
    return 0;
}

#define OBSERVED(kernel)                                          \
    static int32_t kernel(gs_kernel_ctx *ctx, void *user) {       \
        kernel_enter();                                           \
        int32_t rc = kernel##_body(ctx, user);                    \
        kernel_leave();                                           \
        return rc;                                                \
    }
OBSERVED(step_kernel)
OBSERVED(widen_kernel)
OBSERVED(sum_quarters_kernel)
OBSERVED(join_kernel)

/* ---- the graph ---------------------------------------------------------------------------- */

enum { EST_A = 1000, EST_B = 200, EST_C = 100, EST_JOIN = 100 };
#define WANT_WORK_NS (5u * EST_A + 5u * EST_B + 5u * EST_C + EST_JOIN) /* 6600 */
#define WANT_CRITICAL_NS (5u * EST_A + EST_JOIN)                     /* 5100 */
#define OPERATOR_NODES 16u

static int fail_b3; /* set to make "b3" fail */

static const step_params A[5] = {{OP_MUL, 2.0f, NULL}, {OP_ADD, 3.0f, NULL}, {OP_RELU, 0.0f, NULL},
                                 {OP_MUL, 0.5f, NULL}, {OP_ADD, -1.0f, NULL}};
static const step_params B[5] = {{OP_ADD, 1.0f, NULL}, {OP_SQUARE, 0.0f, NULL}, {OP_MUL, 3.0f, &fail_b3},
                                 {OP_ADD, -10.0f, NULL}, {OP_MUL, 0.25f, NULL}};
static const step_params C[3] = {{OP_ADD, 5.0f, NULL}, {OP_NEG, 0.0f, NULL}, {OP_MUL, 2.0f, NULL}}; /* c3..c5 */

static const char *op_name(step_kind k) {
    switch (k) {
    case OP_MUL: return "Mul";
    case OP_ADD: return "Add";
    case OP_RELU: return "Relu";
    case OP_SQUARE: return "Square";
    case OP_NEG: return "Neg";
    }
    return "";
}

static gs_value add_node(gs_graph *g, const char *name, const char *op, gs_kernel_fn k, const void *user,
                         const gs_value *inputs, uint32_t num_inputs, size_t out_bytes, uint64_t estimated_ns) {
    gs_node_desc d = {.name = name, .op_type = op, .kernel = k, .user_data = (void *)user,
                      .inputs = inputs, .num_inputs = num_inputs, .num_outputs = 1,
                      .output_sizes = &out_bytes, .estimated_ns = estimated_ns};
    uint32_t id;
    CHECK_OK(gs_graph_add_node(g, &d, &id));
    return (gs_value){id, 0};
}

typedef struct {
    gs_graph *g;
    gs_value x, a5, join;
} model;

static model build(void) {
    model m;
    CHECK_OK(gs_graph_new(&m.g));
    CHECK_OK(gs_graph_add_input(m.g, "x", VEC_BYTES, &m.x));
    char name[8];

    gs_value v = m.x;
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "a%d", i + 1);
        v = add_node(m.g, name, op_name(A[i].kind), step_kernel, &A[i], &v, 1, VEC_BYTES, EST_A);
    }
    m.a5 = v;

    gs_value b = m.x;
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "b%d", i + 1);
        b = add_node(m.g, name, op_name(B[i].kind), step_kernel, &B[i], &b, 1, VEC_BYTES, EST_B);
    }

    gs_value c = add_node(m.g, "c1", "Widen", widen_kernel, NULL, &m.x, 1, WIDEN * VEC_BYTES, EST_C);
    c = add_node(m.g, "c2", "SumQuarters", sum_quarters_kernel, NULL, &c, 1, VEC_BYTES, EST_C);
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "c%d", i + 3);
        c = add_node(m.g, name, op_name(C[i].kind), step_kernel, &C[i], &c, 1, VEC_BYTES, EST_C);
    }

    gs_value parts[3] = {m.a5, b, c};
    m.join = add_node(m.g, "join", "Sum", join_kernel, NULL, parts, 3, VEC_BYTES, EST_JOIN);
    CHECK_OK(gs_graph_mark_output(m.g, m.join));
    CHECK_OK(gs_graph_mark_output(m.g, m.a5));
    CHECK_OK(gs_graph_finalize(m.g));
    return m;
}

/* ---- expected values ---------------------------------------------------------------------- */

_Alignas(16) static float xs[N];
static float want_a5[N], want_join[N];

static void expected_values(void) {
    for (int i = 0; i < N; i++) {
        float x = (float)(i % 16 - 8); /* -8 .. 7 */
        xs[i] = x;
        float a = max0(2.0f * x + 3.0f) / 2.0f - 1.0f;
        float b = (3.0f * (x + 1.0f) * (x + 1.0f) - 10.0f) / 4.0f;
        float c = -20.0f * x - 10.0f;
        want_a5[i] = a;
        want_join[i] = a + b + c;
    }
    /* The worked examples of the header comment: x = 0 is element 8, x = 1 element 9. */
    CHECK(want_a5[8] == 0.5f && want_join[8] == -11.25f, "hand check for x = 0: a5 %g, join %g", want_a5[8],
          want_join[8]);
    CHECK(want_a5[9] == 1.5f && want_join[9] == -28.0f, "hand check for x = 1: a5 %g, join %g", want_a5[9],
          want_join[9]);
}

/* ---- running and checking ----------------------------------------------------------------- */

static gs_pool *pool;

static uint64_t live_bytes(void) {
    gs_pool_stats s;
    CHECK_OK(gs_pool_get_stats(pool, &s));
    return s.live_bytes;
}

static void check_vector(const char *what, const char *label, int run, const gs_tensor *t, const float *want) {
    CHECK(t->nbytes == VEC_BYTES && t->ndim == 1 && t->dims[0] == N && t->dtype == GS_DTYPE_F32,
          "%s run %d: '%s' has %zu bytes, ndim %d", label, run, what, t->nbytes, (int)t->ndim);
    const float *got = (const float *)t->data;
    for (int i = 0; i < N; i++)
        CHECK(got[i] == want[i], "%s run %d: %s[%d] is %g, expected %g (x = %g)", label, run, what, i, got[i],
              want[i], xs[i]);
}

static gs_run_options with_input(gs_run_options o) {
    static gs_input_binding binding;
    binding = (gs_input_binding){
        .value = {0, 0},
        .tensor = {.data = xs, .nbytes = sizeof xs, .dtype = GS_DTYPE_F32, .ndim = 1, .dims = {N}, .strides = {1}},
    };
    o.inputs = &binding;
    o.num_inputs = 1;
    return o;
}

/* Runs `runs` times with `opts` (inputs filled in here), checks every output and that the pool
 * is empty after each result is freed. Returns the largest peak_live_bytes seen. */
static uint64_t run_checked(const model *m, gs_run_options opts, const char *label, int runs) {
    opts = with_input(opts);
    uint64_t peak = 0;
    reset_observations();
    for (int run = 0; run < runs; run++) {
        gs_run_result *r = NULL;
        int32_t st = gs_run(m->g, pool, &opts, &r);
        CHECK(st == GS_OK, "%s run %d: gs_run returned %s: %s", label, run, gs_status_name(st),
              gs_last_error_message());
        gs_tensor t;
        CHECK_OK(gs_result_output(r, m->join, &t));
        check_vector("join", label, run, &t, want_join);
        CHECK_OK(gs_result_output(r, m->a5, &t));
        check_vector("a5", label, run, &t, want_a5);
        gs_run_stats s;
        CHECK_OK(gs_result_stats(r, &s));
        CHECK(s.nodes_run == OPERATOR_NODES, "%s run %d: nodes_run %llu, expected %u", label, run,
              (unsigned long long)s.nodes_run, OPERATOR_NODES);
        CHECK(s.peak_live_bytes >= 2 * VEC_BYTES, "%s run %d: peak_live_bytes %llu is below the outputs' size",
              label, run, (unsigned long long)s.peak_live_bytes);
        if (opts.memory_limit_bytes)
            CHECK(s.peak_live_bytes <= opts.memory_limit_bytes,
                  "%s run %d: peak_live_bytes %llu is over the %llu-byte memory limit", label, run,
                  (unsigned long long)s.peak_live_bytes, (unsigned long long)opts.memory_limit_bytes);
        if (opts.executor && ((opts.flags & GS_RUN_FORCE_EXECUTOR) || opts.memory_limit_bytes))
            CHECK(s.threads == gs_executor_threads(opts.executor), "%s run %d: on %u threads, expected the executor's %u",
                  label, run, (unsigned)s.threads, (unsigned)gs_executor_threads(opts.executor));
        if (s.peak_live_bytes > peak) peak = s.peak_live_bytes;
        gs_result_free(r);
        CHECK(live_bytes() == 0, "%s run %d: %llu bytes live after gs_result_free", label, run,
              (unsigned long long)live_bytes());
    }
    /* The calling thread alone without an executor; at most the executor's threads with one;
     * never more kernels at once than the window allows. */
    uint32_t most_threads = opts.executor ? gs_executor_threads(opts.executor) : 1;
    uint32_t most_at_once = opts.window && opts.window < most_threads ? opts.window : most_threads;
    int seen = threads_seen(), at_once = atomic_load(&max_in_flight);
    CHECK(seen >= 1 && (uint32_t)seen <= most_threads, "%s: kernels ran on %d threads, expected 1..%u", label, seen,
          (unsigned)most_threads);
    CHECK(at_once >= 1 && (uint32_t)at_once <= most_at_once, "%s: %d kernels ran at once, expected 1..%u", label,
          at_once, (unsigned)most_at_once);
    if (!opts.executor)
        CHECK(seen_threads[0] == (uintptr_t)&thread_tag, "%s: kernels ran off the calling thread", label);
    if (runs > 1)
        printf("  %-34s %3d runs ok, peak live %6llu bytes, %d thread(s), %d kernel(s) at once\n", label, runs,
               (unsigned long long)peak, seen, at_once);
    return peak;
}

/* A run that must fail with `want`, naming `needle` (and `needle2` unless NULL). */
static void run_failing(const model *m, gs_run_options opts, const char *label, int32_t want, const char *needle,
                        const char *needle2) {
    opts = with_input(opts);
    static char sentinel;
    gs_run_result *const before = (gs_run_result *)(void *)&sentinel; /* a failed run leaves *out as it was */
    gs_run_result *r = before;
    int32_t st = gs_run(m->g, pool, &opts, &r);
    const char *msg = gs_last_error_message();
    CHECK(st == want, "%s: gs_run returned %s, expected %s: %s", label, gs_status_name(st), gs_status_name(want),
          st == GS_OK ? "(no error)" : msg);
    CHECK(strstr(msg, needle), "%s: the message does not name %s: \"%s\"", label, needle, msg);
    CHECK(!needle2 || strstr(msg, needle2), "%s: the message does not mention %s: \"%s\"", label, needle2, msg);
    CHECK(r == before, "%s: a failed run changed *out", label);
    CHECK(live_bytes() == 0, "%s: %llu bytes live after the failed run", label, (unsigned long long)live_bytes());
}

/* ---- simulation --------------------------------------------------------------------------- */

static gs_sim_result simulate(const model *m, uint32_t threads, uint32_t policy) {
    gs_sim_options o = {.threads = threads, .policy = policy};
    gs_sim_result r;
    CHECK_OK(gs_simulate(m->g, &o, &r));
    return r;
}

static void check_simulation(const model *m, gs_sim_result table[2][3]) {
    static const uint32_t threads[3] = {1, 2, 8};
    static const uint32_t policies[2] = {GS_POLICY_CRITICAL_PATH, GS_POLICY_FIFO};
    static const char *const names[2] = {"critical", "fifo"};
    printf("  policy    threads  makespan  lower bound  utilization\n");
    for (uint32_t p = 0; p < 2; p++) {
        for (int i = 0; i < 3; i++) {
            gs_sim_result r = simulate(m, threads[i], policies[p]);
            table[p][i] = r;
            printf("  %-8s  %7u  %8llu  %11llu  %11.3f\n", names[p], (unsigned)threads[i],
                   (unsigned long long)r.makespan_ns, (unsigned long long)r.makespan_lb_ns, r.utilization);
            CHECK(r.work_ns == WANT_WORK_NS && r.critical_path_ns == WANT_CRITICAL_NS,
                  "%s/%u: work %llu critical path %llu, expected %u and %u", names[p], (unsigned)threads[i],
                  (unsigned long long)r.work_ns, (unsigned long long)r.critical_path_ns, WANT_WORK_NS,
                  WANT_CRITICAL_NS);
            CHECK(r.nodes_run == OPERATOR_NODES, "%s/%u: nodes_run %llu", names[p], (unsigned)threads[i],
                  (unsigned long long)r.nodes_run);
            CHECK(r.makespan_ns >= r.makespan_lb_ns, "%s/%u: makespan %llu below its lower bound %llu", names[p],
                  (unsigned)threads[i], (unsigned long long)r.makespan_ns, (unsigned long long)r.makespan_lb_ns);
            uint64_t lb = (r.work_ns + threads[i] - 1) / threads[i];
            if (r.critical_path_ns > lb) lb = r.critical_path_ns;
            CHECK(r.makespan_lb_ns >= lb, "%s/%u: lower bound %llu, below max(cp, work/threads) = %llu",
                  names[p], (unsigned)threads[i], (unsigned long long)r.makespan_lb_ns, (unsigned long long)lb);
            CHECK(r.utilization > 0.0 && r.utilization <= 1.0, "%s/%u: utilization %g outside (0, 1]", names[p],
                  (unsigned)threads[i], r.utilization);
            double util = (double)r.work_ns / ((double)r.makespan_ns * threads[i]);
            CHECK(absd(r.utilization - util) < 1e-9, "%s/%u: utilization %g, work/(makespan*threads) is %g",
                  names[p], (unsigned)threads[i], r.utilization, util);
            CHECK(r.peak_live_bytes >= 2 * VEC_BYTES, "%s/%u: peak_live_bytes %llu", names[p],
                  (unsigned)threads[i], (unsigned long long)r.peak_live_bytes);
            if (i == 0)
                CHECK(r.makespan_ns == r.work_ns, "%s/1: makespan %llu on one thread, expected the work %llu",
                      names[p], (unsigned long long)r.makespan_ns, (unsigned long long)r.work_ns);
            else
                CHECK(r.makespan_ns <= table[p][i - 1].makespan_ns, "%s: makespan grew from %llu to %llu at %u threads",
                      names[p], (unsigned long long)table[p][i - 1].makespan_ns, (unsigned long long)r.makespan_ns,
                      (unsigned)threads[i]);
        }
    }
    /* Critical path first hides branches b and c behind a on 2 threads: the optimum. */
    CHECK(table[0][1].makespan_ns == WANT_CRITICAL_NS, "critical-path policy on 2 threads: makespan %llu, expected %u",
          (unsigned long long)table[0][1].makespan_ns, WANT_CRITICAL_NS);
}

/* ---- main --------------------------------------------------------------------------------- */

int main(void) {
    expected_values();
    CHECK_OK(gs_pool_new(NULL, &pool));
    model m = build();

    /* The analysis agrees with the estimates: a1..a5 then join. */
    gs_graph_info info;
    CHECK_OK(gs_graph_get_info(m.g, &info));
    CHECK(info.total_work_ns == WANT_WORK_NS && info.critical_path_ns == WANT_CRITICAL_NS,
          "graph info: work %llu, critical path %llu", (unsigned long long)info.total_work_ns,
          (unsigned long long)info.critical_path_ns);
    uint32_t path[16];
    size_t len = 0;
    CHECK_OK(gs_graph_critical_path(m.g, path, 16, &len));
    CHECK(len == 6, "critical path has %zu nodes, expected 6", len);
    static const char *const want_path[6] = {"a1", "a2", "a3", "a4", "a5", "join"};
    for (size_t i = 0; i < len; i++)
        CHECK(strcmp(gs_graph_node_name(m.g, path[i]), want_path[i]) == 0, "critical path node %zu is '%s', expected '%s'",
              i, gs_graph_node_name(m.g, path[i]), want_path[i]);

    printf("(e) simulation, before any run\n");
    gs_sim_result before[2][3], after[2][3];
    check_simulation(&m, before);

    gs_executor *exec;
    CHECK_OK(gs_executor_new(&(gs_executor_config){.threads = 2}, &exec));
    CHECK(gs_executor_threads(exec) == 2, "gs_executor_threads is %u, expected 2", (unsigned)gs_executor_threads(exec));

    printf("(a) calling thread, (b) executor with 2 threads\n");
    uint64_t seq_peak = run_checked(&m, (gs_run_options){0}, "calling thread", RUNS);
    run_checked(&m, (gs_run_options){.policy = GS_POLICY_FIFO}, "calling thread, fifo (ignored)", 5);
    run_checked(&m, (gs_run_options){.executor = exec, .flags = FORCED, .policy = GS_POLICY_CRITICAL_PATH}, "executor, critical path",
                RUNS);
    run_checked(&m, (gs_run_options){.executor = exec, .flags = FORCED, .policy = GS_POLICY_FIFO}, "executor, fifo", RUNS);
    run_checked(&m, (gs_run_options){.executor = exec, .flags = FORCED, .policy = GS_POLICY_BOTTOM_LEVEL}, "executor, bottom level", RUNS);
    run_checked(&m,
                (gs_run_options){.executor = exec, .policy = GS_POLICY_CRITICAL_PATH, .flags = GS_RUN_FREEZE_ESTIMATES | FORCED},
                "executor, critical path, frozen", RUNS);

    printf("(c) window 1\n");
    run_checked(&m, (gs_run_options){.executor = exec, .flags = FORCED, .window = 1}, "executor, window 1, critical path", RUNS);
    run_checked(&m, (gs_run_options){.executor = exec, .flags = FORCED, .window = 1, .policy = GS_POLICY_FIFO},
                "executor, window 1, fifo", RUNS);

    printf("(d) memory limits (feasible: the sequential peak, %llu bytes)\n", (unsigned long long)seq_peak);
    run_checked(&m, (gs_run_options){.memory_limit_bytes = seq_peak}, "calling thread, limit", RUNS);
    run_checked(&m, (gs_run_options){.executor = exec, .memory_limit_bytes = seq_peak}, "executor, limit, critical",
                RUNS);
    run_checked(&m, (gs_run_options){.executor = exec, .memory_limit_bytes = seq_peak, .policy = GS_POLICY_FIFO},
                "executor, limit, fifo", RUNS);
    run_checked(&m, (gs_run_options){.executor = exec, .memory_limit_bytes = seq_peak, .window = 1},
                "executor, limit, window 1", RUNS);

    /* 3 vectors: every node but c1 fits next to what the others hold; c1 (4 vectors) never does. */
    const uint64_t small = 3 * VEC_BYTES;
    char c1_bytes[32];
    snprintf(c1_bytes, sizeof c1_bytes, "%zu bytes", WIDEN * VEC_BYTES);
    run_failing(&m, (gs_run_options){.memory_limit_bytes = small}, "calling thread, limit < c1", GS_ERR_MEMORY_LIMIT,
                "'c1'", c1_bytes);
    printf("  calling thread, limit < c1: %s\n", gs_last_error_message());
    for (int run = 0; run < RUNS; run++) {
        run_failing(&m, (gs_run_options){.executor = exec, .memory_limit_bytes = small}, "executor, limit < c1",
                    GS_ERR_MEMORY_LIMIT, "'c1'", c1_bytes);
        run_failing(&m, (gs_run_options){.executor = exec, .memory_limit_bytes = small, .policy = GS_POLICY_FIFO},
                    "executor, fifo, limit < c1", GS_ERR_MEMORY_LIMIT, "'c1'", c1_bytes);
    }
    printf("  executor, limit < c1: %s\n", gs_last_error_message());
    gs_sim_result sr;
    int32_t st = gs_simulate(m.g, &(gs_sim_options){.threads = 2, .memory_limit_bytes = small}, &sr);
    CHECK(st == GS_ERR_MEMORY_LIMIT && strstr(gs_last_error_message(), "'c1'"),
          "gs_simulate under the same limit: %s: %s", gs_status_name(st), gs_last_error_message());
    /* Below every node's output: the run cannot start at all. */
    run_failing(&m, (gs_run_options){.memory_limit_bytes = 1000}, "calling thread, limit 1000", GS_ERR_MEMORY_LIMIT,
                "1000-byte", NULL);
    run_failing(&m, (gs_run_options){.executor = exec, .memory_limit_bytes = 1000}, "executor, limit 1000",
                GS_ERR_MEMORY_LIMIT, "1000-byte", NULL);
    run_checked(&m, (gs_run_options){.executor = exec, .flags = FORCED}, "executor, after limit failures", 5);

    printf("(f) a failing kernel ('b3')\n");
    for (int run = 0; run < RUNS; run++) {
        fail_b3 = 1;
        uint32_t policy = (uint32_t)(run % 2);
        run_failing(&m, (gs_run_options){.executor = exec, .flags = FORCED, .policy = policy}, "executor, b3 fails",
                    GS_ERR_KERNEL_FAILED, "'b3'", "injected failure");
        fail_b3 = 0;
        run_checked(&m, (gs_run_options){.executor = exec, .flags = FORCED, .policy = policy}, "rerun after b3 failed", 1);
    }
    fail_b3 = 1;
    run_failing(&m, (gs_run_options){0}, "calling thread, b3 fails", GS_ERR_KERNEL_FAILED, "'b3'", "injected failure");
    printf("  %s\n", gs_last_error_message());
    fail_b3 = 0;
    run_checked(&m, (gs_run_options){.executor = exec, .flags = FORCED}, "executor, clean rerun", RUNS);

    printf("(e) simulation, after the runs: given estimates win over learned ones\n");
    check_simulation(&m, after);
    CHECK(memcmp(before, after, sizeof before) == 0, "the simulation changed after the graph ran");

    gs_executor_free(exec);
    gs_graph_free(m.g);
    gs_pool_stats ps;
    CHECK_OK(gs_pool_get_stats(pool, &ps));
    CHECK(ps.live_bytes == 0, "%llu bytes live at the end", (unsigned long long)ps.live_bytes);
    gs_pool_free(pool);

    printf("parallel: OK (makespan on 1/2/8 threads: %llu/%llu/%llu ns, critical path %u ns)\n",
           (unsigned long long)before[0][0].makespan_ns, (unsigned long long)before[0][1].makespan_ns,
           (unsigned long long)before[0][2].makespan_ns, WANT_CRITICAL_NS);
    return 0;
}
