/*
 * error_tour: every way to misuse the C API that graphsched reports, one case per line.
 *
 * Each case checks the exact status and that gs_last_error_message() names the culprit (the
 * node, value or argument at fault). All cases run; the program fails if any of them did.
 */
#include <graphsched.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

static int failures;

/* `needles` is NULL-terminated; each must occur in the last error message. */
static void expect(int line, const char *call, int32_t got, int32_t want, const char *const *needles) {
    const char *msg = gs_last_error_message();
    const char *missing = NULL;
    for (size_t i = 0; needles[i] && !missing; i++)
        if (!strstr(msg, needles[i])) missing = needles[i];
    if (got == want && !missing) {
        printf("  ok  %-24s %s\n", gs_status_name(got), msg);
        return;
    }
    failures++;
    fprintf(stderr, "FAIL line %d: %s\n  returned %s, expected %s\n  message: \"%s\"\n", line, call,
            gs_status_name(got), gs_status_name(want), msg);
    if (missing) fprintf(stderr, "  the message does not mention \"%s\"\n", missing);
}
#define EXPECT(call, want, ...) \
    expect(__LINE__, #call, (int32_t)(call), (want), (const char *const[]){__VA_ARGS__, NULL})

static int32_t copy_kernel(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const gs_tensor *in = gs_ctx_num_inputs(ctx) ? gs_ctx_input(ctx, 0) : NULL;
    gs_tensor *out = gs_ctx_output(ctx, 0);
    memset(out->data, 0, out->nbytes);
    if (in) memcpy(out->data, in->data, in->nbytes < out->nbytes ? in->nbytes : out->nbytes);
    return 0;
}

/* Fails with "bad shape" while *fail is set. */
static int32_t checker_kernel(gs_kernel_ctx *ctx, void *user) {
    if (*(const int *)user) {
        gs_ctx_set_error(ctx, "bad shape");
        return 7;
    }
    return copy_kernel(ctx, NULL);
}

/* Adds a one-output node of `out_bytes` reading inputs[0..n). */
static gs_status add(gs_graph *g, const char *name, const gs_value *inputs, uint32_t n, size_t out_bytes) {
    gs_node_desc d = {.name = name, .kernel = copy_kernel, .inputs = inputs, .num_inputs = n,
                      .num_outputs = 1, .output_sizes = &out_bytes};
    return gs_graph_add_node(g, &d, NULL);
}

static uint64_t live_bytes(const gs_pool *pool) {
    gs_pool_stats s;
    CHECK_OK(gs_pool_get_stats(pool, &s));
    return s.live_bytes;
}

int main(void) {
    gs_graph *g;
    gs_pool *pool;
    CHECK_OK(gs_pool_new(NULL, &pool));

    printf("cycles and references (reported by finalize)\n");
    CHECK_OK(gs_graph_new(&g));
    gs_value a = {0, 0}, b = {1, 0}, c = {2, 0}; /* a reads c, which is added later */
    CHECK_OK(add(g, "a", &c, 1, 16));
    CHECK_OK(add(g, "b", &a, 1, 16));
    CHECK_OK(add(g, "c", &b, 1, 16));
    EXPECT(gs_graph_finalize(g), GS_ERR_CYCLE, "the graph has a cycle: ", "'a'", "'b'", "'c'");
    gs_graph_free(g);

    CHECK_OK(gs_graph_new(&g));
    CHECK_OK(add(g, "selfie", &a, 1, 16)); /* node 0 reads its own output */
    EXPECT(gs_graph_finalize(g), GS_ERR_CYCLE, "'selfie' -> 'selfie'");
    gs_graph_free(g);

    CHECK_OK(gs_graph_new(&g));
    CHECK_OK(add(g, "reader", &b, 1, 16)); /* node 1 does not exist (yet) */
    EXPECT(gs_graph_finalize(g), GS_ERR_UNKNOWN_VALUE, "'reader'", "node 1");
    CHECK_OK(add(g, "late", NULL, 0, 16)); /* a failed finalize changes nothing: add it, retry */
    CHECK_OK(gs_graph_finalize(g));
    gs_graph_free(g);

    CHECK_OK(gs_graph_new(&g));
    gs_value a3 = {0, 3};
    CHECK_OK(add(g, "src", NULL, 0, 16));
    CHECK_OK(add(g, "reader", &a3, 1, 16));
    EXPECT(gs_graph_finalize(g), GS_ERR_OUTPUT_INDEX, "'reader'", "output 3 of node 'src'");
    gs_graph_free(g);

    printf("names, sizes and flags (reported when added)\n");
    CHECK_OK(gs_graph_new(&g));
    CHECK_OK(add(g, "dup", NULL, 0, 16));
    EXPECT(add(g, "dup", NULL, 0, 16), GS_ERR_DUPLICATE_NAME, "'dup'");
    EXPECT(gs_graph_add_input(g, "dup", 16, NULL), GS_ERR_DUPLICATE_NAME, "'dup'");
    EXPECT(add(g, "", NULL, 0, 16), GS_ERR_EMPTY_NAME, "empty name");
    EXPECT(gs_graph_add_input(g, "bad\xff", 16, NULL), GS_ERR_INVALID_ARGUMENT, "'name'", "UTF-8");
    EXPECT(add(g, "caf\xe9", NULL, 0, 16), GS_ERR_INVALID_ARGUMENT, "'desc.name'", "UTF-8");
    CHECK_OK(add(g, "empty", NULL, 0, 0)); /* a value of 0 bytes is an empty tensor, not an error */
    EXPECT(add(g, "huge", NULL, 0, (size_t)PTRDIFF_MAX + 1), GS_ERR_SIZE_OVERFLOW, "'huge'");
    gs_node_desc flagged = {.name = "flagged", .kernel = copy_kernel, .num_outputs = 1,
                            .output_sizes = &(size_t){16}, .flags = 0x80};
    EXPECT(gs_graph_add_node(g, &flagged, NULL), GS_ERR_INVALID_ARGUMENT, "'flagged'", "0x80");

    printf("NULL and invalid arguments\n");
    EXPECT(gs_graph_new(NULL), GS_ERR_NULL_ARGUMENT, "'out'");
    EXPECT(gs_pool_new(NULL, NULL), GS_ERR_NULL_ARGUMENT, "'out'");
    EXPECT(gs_graph_add_input(NULL, "x", 16, NULL), GS_ERR_NULL_ARGUMENT, "'graph'");
    EXPECT(gs_graph_add_input(g, NULL, 16, NULL), GS_ERR_NULL_ARGUMENT, "'name'");
    EXPECT(gs_graph_add_node(g, NULL, NULL), GS_ERR_NULL_ARGUMENT, "'desc'");
    gs_node_desc unnamed = {.kernel = copy_kernel, .num_outputs = 1, .output_sizes = &(size_t){16}};
    EXPECT(gs_graph_add_node(g, &unnamed, NULL), GS_ERR_NULL_ARGUMENT, "'desc.name'");
    gs_node_desc no_kernel = {.name = "lazy", .num_outputs = 1, .output_sizes = &(size_t){16}};
    EXPECT(gs_graph_add_node(g, &no_kernel, NULL), GS_ERR_NULL_ARGUMENT, "'lazy'", "NULL kernel");
    gs_node_desc no_sizes = {.name = "sizeless", .kernel = copy_kernel, .num_outputs = 1};
    EXPECT(gs_graph_add_node(g, &no_sizes, NULL), GS_ERR_NULL_ARGUMENT, "'desc.output_sizes'");

    /* Never-created handles: the address of a local, and a handle of another kind. */
    struct { uint64_t junk[8]; } fake = {{0}};
    gs_graph *bogus = (gs_graph *)(void *)&fake;
    EXPECT(gs_graph_add_input(bogus, "x", 16, NULL), GS_ERR_INVALID_HANDLE, "'graph'", "gs_graph");
    EXPECT(gs_graph_finalize((gs_graph *)(void *)pool), GS_ERR_INVALID_HANDLE, "'graph'", "gs_graph");
    EXPECT(gs_pool_acquire((gs_pool *)(void *)g, 16, &(void *){NULL}), GS_ERR_INVALID_HANDLE, "'pool'", "gs_pool");
    gs_graph_free(bogus); /* not a handle: left alone */

    printf("graph lifecycle\n");
    gs_run_result *result = NULL;
    gs_graph_info info;
    EXPECT(gs_run(g, pool, NULL, &result), GS_ERR_NOT_FINALIZED, "gs_graph_finalize");
    EXPECT(gs_graph_get_info(g, &info), GS_ERR_NOT_FINALIZED, "gs_graph_finalize");
    CHECK_OK(gs_graph_finalize(g));
    EXPECT(gs_graph_get_info(g, NULL), GS_ERR_NULL_ARGUMENT, "'out'");
    EXPECT(gs_run(g, NULL, NULL, &result), GS_ERR_NULL_ARGUMENT, "'pool'");
    EXPECT(gs_run(g, pool, NULL, NULL), GS_ERR_NULL_ARGUMENT, "'out'");
    EXPECT(add(g, "too_late", NULL, 0, 16), GS_ERR_FINALIZED, "finalized");
    EXPECT(gs_graph_add_input(g, "too_late", 16, NULL), GS_ERR_FINALIZED, "finalized");
    EXPECT(gs_graph_mark_output(g, (gs_value){0, 0}), GS_ERR_FINALIZED, "finalized");
    EXPECT(gs_graph_finalize(g), GS_ERR_FINALIZED, "finalized");
    gs_graph_free(g);

    printf("input bindings, kernel failure, results\n");
    int fail = 1;
    CHECK_OK(gs_graph_new(&g));
    gs_value x, first = {1, 0}, checked = {2, 0}, last = {3, 0};
    CHECK_OK(gs_graph_add_input(g, "x", 16, &x));
    CHECK_OK(add(g, "first", &x, 1, 64));
    gs_node_desc checker = {.name = "checker", .op_type = "Check", .kernel = checker_kernel, .user_data = &fail,
                            .inputs = &first, .num_inputs = 1, .num_outputs = 1, .output_sizes = &(size_t){64}};
    CHECK_OK(gs_graph_add_node(g, &checker, NULL));
    CHECK_OK(add(g, "last", &checked, 1, 16));
    CHECK_OK(gs_graph_mark_output(g, last));
    CHECK_OK(gs_graph_finalize(g));

    _Alignas(16) static unsigned char buf[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    gs_input_binding bind[2] = {{.value = x, .tensor = {.data = buf, .nbytes = 16}}};
    gs_run_options opts = {.inputs = bind, .num_inputs = 1};
    EXPECT(gs_run(g, pool, NULL, &result), GS_ERR_INPUT_BINDING, "'x'", "not bound");
    bind[0].tensor.nbytes = 8;
    EXPECT(gs_run(g, pool, &opts, &result), GS_ERR_INPUT_BINDING, "'x'", "16 bytes", "8 bytes");
    bind[0].tensor = (gs_tensor){.data = buf + 4, .nbytes = 16};
    EXPECT(gs_run(g, pool, &opts, &result), GS_ERR_INPUT_BINDING, "'x'", "aligned");
    bind[0].tensor.data = buf;
    bind[1] = bind[0];
    EXPECT(gs_run(g, pool, &(gs_run_options){.inputs = bind, .num_inputs = 2}, &result), GS_ERR_INPUT_BINDING, "'x'",
           "twice");
    bind[1].value = first;
    EXPECT(gs_run(g, pool, &(gs_run_options){.inputs = bind + 1, .num_inputs = 1}, &result), GS_ERR_INPUT_BINDING,
           "'first'", "not a graph input");

    EXPECT(gs_run(g, pool, &opts, &result), GS_ERR_KERNEL_FAILED, "'checker'", "bad shape", "returned 7");
    CHECK(result == NULL, "a failed run must leave *out untouched");
    CHECK(live_bytes(pool) == 0, "%llu bytes still live after a failed run", (unsigned long long)live_bytes(pool));

    fail = 0; /* the same graph runs fine afterwards */
    CHECK_OK(gs_run(g, pool, &opts, &result));
    gs_tensor t;
    CHECK_OK(gs_result_output(result, last, &t));
    CHECK(t.nbytes == 16 && memcmp(t.data, buf, 16) == 0, "'last' does not hold a copy of x");
    EXPECT(gs_result_output(result, checked, &t), GS_ERR_NOT_AN_OUTPUT, "'checker'", "not a graph output");
    EXPECT(gs_result_output(result, (gs_value){3, 1}, &t), GS_ERR_OUTPUT_INDEX, "'last'", "output 1");
    EXPECT(gs_result_output(result, (gs_value){99, 0}, &t), GS_ERR_UNKNOWN_VALUE, "(99, 0)");
    EXPECT(gs_result_output(result, last, NULL), GS_ERR_NULL_ARGUMENT, "'out'");
    gs_result_free(result);
    CHECK(live_bytes(pool) == 0, "bytes still live after gs_result_free");
    gs_graph_free(g);

    printf("executors, run options, simulation\n");
    EXPECT(gs_executor_new(NULL, NULL), GS_ERR_NULL_ARGUMENT, "'out'");
    EXPECT(gs_executor_new(&(gs_executor_config){.threads = 2}, NULL), GS_ERR_NULL_ARGUMENT, "'out'");
    gs_executor *exec = NULL;
    CHECK_OK(gs_executor_new(&(gs_executor_config){.threads = 2}, &exec));
    CHECK(gs_executor_threads(exec) == 2, "gs_executor_threads is %u, expected 2", (unsigned)gs_executor_threads(exec));
    /* gs_executor_threads returns a count, 0 for a bad handle (with the last error set). */
    CHECK(gs_executor_threads(NULL) == 0 && strstr(gs_last_error_message(), "'executor'"),
          "gs_executor_threads(NULL): \"%s\"", gs_last_error_message());
    CHECK(gs_executor_threads((gs_executor *)(void *)&fake) == 0 && strstr(gs_last_error_message(), "gs_executor"),
          "gs_executor_threads(never created): \"%s\"", gs_last_error_message());
    printf("  ok  gs_executor_threads(bad handle) is 0\n");

    /* src (64 bytes) -> big (4096 bytes) -> tail (16 bytes); "tail" is the graph output. */
    CHECK_OK(gs_graph_new(&g));
    gs_value src = {0, 0}, big = {1, 0}, tail = {2, 0};
    gs_sim_options sim = {.threads = 2};
    gs_sim_result simres;
    CHECK_OK(add(g, "src", NULL, 0, 64));
    gs_node_desc big_desc = {.name = "big", .op_type = "Expand", .kernel = copy_kernel, .inputs = &src,
                             .num_inputs = 1, .num_outputs = 1, .output_sizes = &(size_t){4096}};
    CHECK_OK(gs_graph_add_node(g, &big_desc, NULL));
    CHECK_OK(add(g, "tail", &big, 1, 16));
    CHECK_OK(gs_graph_mark_output(g, tail));
    EXPECT(gs_simulate(g, &sim, &simres), GS_ERR_NOT_FINALIZED, "gs_graph_finalize");
    CHECK_OK(gs_graph_finalize(g));

    gs_run_options bad = {.executor = (gs_executor *)(void *)&fake}; /* never created */
    EXPECT(gs_run(g, pool, &bad, &result), GS_ERR_INVALID_HANDLE, "'options.executor'", "gs_executor");
    bad.executor = (gs_executor *)(void *)pool; /* a handle of another kind */
    EXPECT(gs_run(g, pool, &bad, &result), GS_ERR_INVALID_HANDLE, "'options.executor'", "gs_executor");
    EXPECT(gs_run(g, pool, &(gs_run_options){.executor = exec, .policy = 7}, &result), GS_ERR_INVALID_ARGUMENT,
           "options.policy", "7");
    EXPECT(gs_run(g, pool, &(gs_run_options){.policy = 7}, &result), GS_ERR_INVALID_ARGUMENT, "options.policy");
    EXPECT(gs_run(g, pool, &(gs_run_options){.executor = exec, .flags = 0x100}, &result), GS_ERR_INVALID_ARGUMENT,
           "options.flags", "0x100");
    EXPECT(gs_run(g, pool, &(gs_run_options){.flags = GS_RUN_FREEZE_ESTIMATES | 0x80000000u}, &result),
           GS_ERR_INVALID_ARGUMENT, "options.flags", "0x80000000");

    result = NULL;
    /* 1000 bytes: "src" fits, "big" (4096 bytes) never can. */
    EXPECT(gs_run(g, pool, &(gs_run_options){.memory_limit_bytes = 1000}, &result), GS_ERR_MEMORY_LIMIT, "'big'",
           "4096 bytes", "1000-byte");
    CHECK(live_bytes(pool) == 0, "bytes still live after a run over its memory limit");
    EXPECT(gs_run(g, pool, &(gs_run_options){.executor = exec, .memory_limit_bytes = 1000}, &result),
           GS_ERR_MEMORY_LIMIT, "'big'", "4096 bytes", "1000-byte");
    CHECK(live_bytes(pool) == 0, "bytes still live after a run over its memory limit (executor)");
    CHECK(result == NULL, "a failed run must leave *out untouched");
    CHECK_OK(gs_run(g, pool, &(gs_run_options){.executor = exec, .memory_limit_bytes = 4096 + 64}, &result));
    gs_result_free(result);
    result = NULL;
    CHECK(live_bytes(pool) == 0, "bytes still live after gs_result_free");

    EXPECT(gs_simulate(g, &(gs_sim_options){.threads = 0}, &simres), GS_ERR_INVALID_ARGUMENT, "threads");
    EXPECT(gs_simulate(g, &(gs_sim_options){.threads = 1, .policy = 7}, &simres), GS_ERR_INVALID_ARGUMENT,
           "options.policy");
    EXPECT(gs_simulate(g, &(gs_sim_options){.threads = 1, .memory_limit_bytes = 1000}, &simres),
           GS_ERR_MEMORY_LIMIT, "'big'", "4096 bytes");
    EXPECT(gs_simulate(g, NULL, &simres), GS_ERR_NULL_ARGUMENT, "'options'");
    EXPECT(gs_simulate(g, &sim, NULL), GS_ERR_NULL_ARGUMENT, "'out'");
    EXPECT(gs_simulate(NULL, &sim, &simres), GS_ERR_NULL_ARGUMENT, "'graph'");
    CHECK_OK(gs_simulate(g, &sim, &simres));
    gs_graph_free(g);
    gs_executor_free(exec);

    printf("pool\n");
    void *p = NULL;
    _Alignas(16) static unsigned char foreign[64];
    EXPECT(gs_pool_release(pool, foreign), GS_ERR_UNKNOWN_POINTER, "not handed out by this pool");
    CHECK_OK(gs_pool_acquire(pool, 100, &p));
    CHECK_OK(gs_pool_release(pool, p));
    EXPECT(gs_pool_release(pool, p), GS_ERR_UNKNOWN_POINTER, "already released");
    EXPECT(gs_pool_release(pool, NULL), GS_ERR_NULL_ARGUMENT, "'ptr'");
    EXPECT(gs_pool_acquire(pool, (size_t)1 << 62, &p), GS_ERR_OUT_OF_MEMORY, "4611686018427387904");
    EXPECT(gs_pool_acquire(pool, SIZE_MAX, &p), GS_ERR_SIZE_OVERFLOW, "18446744073709551615");
    EXPECT(gs_pool_acquire(pool, 0, &p), GS_ERR_INVALID_ARGUMENT, "0 bytes");
    EXPECT(gs_pool_acquire(pool, 16, NULL), GS_ERR_NULL_ARGUMENT, "'out'");
    CHECK(live_bytes(pool) == 0, "failed acquires left bytes live");

    printf("frees of NULL, status names\n");
    char before[256];
    snprintf(before, sizeof before, "%s", gs_last_error_message());
    gs_graph_free(NULL);
    gs_pool_free(NULL);
    gs_result_free(NULL);
    gs_executor_free(NULL);
    CHECK(strcmp(before, gs_last_error_message()) == 0, "gs_*_free(NULL) changed the last error");
    CHECK(strcmp(gs_status_name(GS_ERR_CYCLE), "GS_ERR_CYCLE") == 0, "gs_status_name(GS_ERR_CYCLE)");
    CHECK(strcmp(gs_status_name(-1), "GS_UNKNOWN_STATUS") == 0, "gs_status_name(-1)");

    printf("fresh and stale messages, reusable cancel tokens\n");
    gs_clear_last_error();
    CHECK(gs_last_error_message()[0] == '\0', "gs_clear_last_error left \"%s\"", gs_last_error_message());
    gs_cancel_token *token = NULL;
    CHECK_OK(gs_cancel_token_new(&token));
    CHECK(gs_cancel_token_cancel(token) == 1, "the first cancel cancels");
    CHECK(gs_cancel_token_reset(token) == 1 && gs_cancel_token_reset(token) == 0, "a reset undoes it, once");
    CHECK(gs_last_error_message()[0] == '\0', "successes write no message: \"%s\"", gs_last_error_message());
    CHECK(gs_cancel_token_cancel(token) == 1, "a reset token can be cancelled again");
    gs_cancel_token_free(token);

    gs_pool_free(pool);
    if (failures) {
        fprintf(stderr, "error_tour: %d case(s) failed\n", failures);
        return 1;
    }
    printf("error_tour: OK\n");
    return 0;
}
