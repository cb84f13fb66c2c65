/*
 * nested_run: a kernel that runs a graph of its own, as an engine's If or Loop operator does,
 * on the run's pool and executor; per-run data; and observers that count what ran.
 *
 *   outer graph: 6 "if" nodes side by side, each reading nothing and writing one int
 *   branch graph: scale (x 3) -> add (+ 1), reading one int input
 *
 * Each "if" node reads the run's user data (a base value, different in each run), binds
 * base + its own index as the branch's input and runs the branch with gs_ctx_pool and
 * gs_ctx_executor: on 2 threads every thread ends up waiting inside a nested run, which must
 * not deadlock (the waiting thread works on the nested run). Observers on the outer run must
 * see each outer node start and end once; observers on the nested runs, each branch node.
 */
#include <graphsched.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"

enum { WIDTH = 6, RUNS = 30 };

static int32_t scale(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    *(int *)gs_ctx_output(ctx, 0)->data = 3 * *(const int *)gs_ctx_input(ctx, 0)->data;
    return 0;
}

static int32_t add_one(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    *(int *)gs_ctx_output(ctx, 0)->data = 1 + *(const int *)gs_ctx_input(ctx, 0)->data;
    return 0;
}

static gs_graph *branch;
static gs_value branch_in, branch_out;
static atomic_int started, ended, failed;

/* The outer runs pass a counter of their own as the observers' data; the nested runs none. */
static void on_start(const gs_node_observation *o, void *data) {
    (void)o;
    atomic_fetch_add(&started, 1);
    if (data) atomic_fetch_add((atomic_int *)data, 1);
}

static void on_end(const gs_node_observation *o, void *data) {
    (void)data;
    atomic_fetch_add(&ended, 1);
    if (!o->ok || o->end_ns < o->start_ns) atomic_fetch_add(&failed, 1);
}

/* The "if" operator: runs the branch on base + index, on the outer run's pool and executor. */
static int32_t if_node(gs_kernel_ctx *ctx, void *user) {
    const int *base = gs_ctx_user_data(ctx);
    if (base == NULL) {
        gs_ctx_set_error(ctx, "no run data");
        return 1;
    }
    /* On this kernel's stack: while it waits, this thread may run other "if" nodes, each with a
       frame of its own, and the binding must stay unwritten until the nested gs_run returns. */
    _Alignas(16) int x = *base + (int)(intptr_t)user;
    gs_input_binding bind = {.value = branch_in, .tensor = {.data = &x, .nbytes = sizeof x}};
    /* Forced onto the threads (when the run has an executor): the branch is a chain of short
       kernels, which graphsched would otherwise keep on this thread, and the nesting on the
       executor would go unexercised. */
    gs_executor *ex = gs_ctx_executor(ctx);
    gs_run_options opts = {.inputs = &bind, .num_inputs = 1, .executor = ex,
                           .flags = ex ? GS_RUN_FORCE_EXECUTOR : 0, .on_node_start = on_start, .on_node_end = on_end};
    gs_run_result *r;
    if (gs_run(branch, gs_ctx_pool(ctx), &opts, &r) != GS_OK) {
        gs_ctx_set_error(ctx, gs_last_error_message());
        return 1;
    }
    gs_tensor t;
    gs_result_output(r, branch_out, &t);
    *(int *)gs_ctx_output(ctx, 0)->data = *(const int *)t.data;
    gs_result_free(r);
    return 0;
}

int main(void) {
    size_t four = sizeof(int);
    uint32_t s, a, ifs[WIDTH];
    CHECK_OK(gs_graph_new(&branch));
    CHECK_OK(gs_graph_add_input(branch, "x", sizeof(int), &branch_in));
    gs_node_desc sd = {.name = "scale", .kernel = scale, .inputs = &branch_in, .num_inputs = 1,
                       .num_outputs = 1, .output_sizes = &four};
    CHECK_OK(gs_graph_add_node(branch, &sd, &s));
    gs_value sv = {s, 0};
    gs_node_desc ad = {.name = "add", .kernel = add_one, .inputs = &sv, .num_inputs = 1, .num_outputs = 1,
                       .output_sizes = &four};
    CHECK_OK(gs_graph_add_node(branch, &ad, &a));
    branch_out = (gs_value){a, 0};
    CHECK_OK(gs_graph_mark_output(branch, branch_out));
    CHECK_OK(gs_graph_finalize(branch));

    gs_graph *outer;
    CHECK_OK(gs_graph_new(&outer));
    for (int k = 0; k < WIDTH; k++) {
        char name[16];
        snprintf(name, sizeof name, "if%d", k);
        gs_node_desc d = {.name = name, .op_type = "If", .kernel = if_node, .user_data = (void *)(intptr_t)k,
                          .num_outputs = 1, .output_sizes = &four};
        CHECK_OK(gs_graph_add_node(outer, &d, &ifs[k]));
        CHECK_OK(gs_graph_mark_output(outer, (gs_value){ifs[k], 0}));
    }
    CHECK_OK(gs_graph_finalize(outer));

    gs_pool *pool;
    gs_executor *ex;
    CHECK_OK(gs_pool_new(NULL, &pool));
    gs_executor_config cfg = {.threads = 2};
    CHECK_OK(gs_executor_new(&cfg, &ex));
    atomic_int outer_started = 0;
    for (int run = 0; run < RUNS; run++) {
        int base = 100 * run;
        gs_executor *on = run % 3 == 2 ? NULL : ex; /* every third run on its caller alone */
        gs_run_options opts = {.executor = on, .flags = on ? GS_RUN_FORCE_EXECUTOR : 0, .user_data = &base,
                               .on_node_start = on_start, .on_node_end = on_end, .observer_data = &outer_started};
        gs_run_result *r;
        CHECK_OK(gs_run(outer, pool, &opts, &r));
        for (int k = 0; k < WIDTH; k++) {
            gs_tensor t;
            CHECK_OK(gs_result_output(r, (gs_value){ifs[k], 0}, &t));
            int want = 3 * (base + k) + 1;
            CHECK(*(const int *)t.data == want, "run %d, if%d: %d, want %d", run, k, *(const int *)t.data, want);
        }
        gs_result_free(r);
    }
    /* Per run: WIDTH outer nodes, and 2 branch nodes in each of WIDTH nested runs. */
    int want = RUNS * (WIDTH + 2 * WIDTH);
    CHECK(atomic_load(&started) == want && atomic_load(&ended) == want, "started %d, ended %d, want %d",
          atomic_load(&started), atomic_load(&ended), want);
    CHECK(atomic_load(&failed) == 0, "%d observations of failed nodes", atomic_load(&failed));
    CHECK(atomic_load(&outer_started) == RUNS * WIDTH, "outer starts %d", atomic_load(&outer_started));

    /* Without user data the "if" kernel fails, and says why. */
    gs_run_result *r = NULL;
    gs_status st = gs_run(outer, pool, NULL, &r);
    CHECK(st == GS_ERR_KERNEL_FAILED && strstr(gs_last_error_message(), "no run data"), "%s: %s",
          gs_status_name(st), gs_last_error_message());

    printf("nested_run: %d runs of %d nested branches each, observed %d node starts\n", RUNS, WIDTH,
           atomic_load(&started));
    gs_executor_free(ex);
    gs_pool_free(pool);
    gs_graph_free(outer);
    gs_graph_free(branch);
    return 0;
}
