/*
 * server: a small server loop. Four client threads send requests back to back to one executor
 * and one pool, under a memory budget the size of one request's bound; the last client's
 * requests are urgent (GS_PRIORITY_HIGH). Every answer is checked, the budget's books must
 * never show more reserved than the budget, and every reservation must be back at the end.
 * Then the same clients again with the executor's threads at a lower OS priority
 * (gs_executor_set_background_nice): the normal requests run on those threads, the urgent ones
 * on their callers, ahead of them by the OS.
 */
#include <graphsched.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define WIDTH 6
#define FLOATS 256
#define CLIENTS 4
#define REQUESTS 40

/* scale: out = in * k, over FLOATS floats (a request's input is read by every branch). */
static int32_t scale(gs_kernel_ctx *ctx, void *user) {
    const float *in = gs_ctx_input(ctx, 0)->data;
    float *out = gs_ctx_output(ctx, 0)->data, k = *(const float *)user;
    for (int i = 0; i < FLOATS; i++) out[i] = in[i] * k;
    return 0;
}

/* sum: out = the sum of every input. */
static int32_t sum(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    float *out = gs_ctx_output(ctx, 0)->data;
    uint32_t n = gs_ctx_num_inputs(ctx);
    for (int i = 0; i < FLOATS; i++) {
        out[i] = 0;
        for (uint32_t j = 0; j < n; j++) out[i] += ((const float *)gs_ctx_input(ctx, j)->data)[i];
    }
    return 0;
}

static gs_graph *graph;
static gs_pool *pool;
static gs_executor *executor;
static gs_value input, output;
static float factors[WIDTH];
static int failures;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *client(void *arg) {
    int id = (int)(size_t)arg;
    _Alignas(16) float x[FLOATS];
    for (int r = 0; r < REQUESTS; r++) {
        for (int i = 0; i < FLOATS; i++) x[i] = (float)(id * 1000 + r + i);
        gs_input_binding bind = {.value = input, .tensor = {.data = x, .nbytes = sizeof x}};
        gs_run_options o = {.inputs = &bind, .num_inputs = 1, .executor = executor,
                            .priority = id == CLIENTS - 1 ? GS_PRIORITY_HIGH : GS_PRIORITY_NORMAL};
        gs_run_result *result;
        gs_tensor t;
        int ok = gs_run(graph, pool, &o, &result) == GS_OK && gs_result_output(result, output, &t) == GS_OK;
        if (ok) {
            const float *y = t.data;
            float total = 0;
            for (int k = 0; k < WIDTH; k++) total += factors[k];
            for (int i = 0; i < FLOATS; i++) ok &= y[i] == x[i] * total;
            gs_result_free(result);
        }
        if (!ok) {
            pthread_mutex_lock(&lock);
            failures++;
            fprintf(stderr, "server: client %d request %d: %s\n", id, r, gs_last_error_message());
            pthread_mutex_unlock(&lock);
        }
    }
    return NULL;
}

int main(void) {
    size_t bytes = FLOATS * sizeof(float);
    gs_value branches[WIDTH];
    uint32_t id;
    if (gs_graph_new(&graph) != GS_OK || gs_graph_add_input(graph, "x", bytes, &input) != GS_OK) return 1;
    for (int k = 0; k < WIDTH; k++) {
        char name[16];
        snprintf(name, sizeof name, "scale%d", k);
        factors[k] = (float)(k + 1);
        gs_node_desc d = {.name = name, .op_type = "Scale", .kernel = scale, .user_data = &factors[k],
                          .inputs = &input, .num_inputs = 1, .num_outputs = 1, .output_sizes = &bytes,
                          .estimated_ns = 20000};
        if (gs_graph_add_node(graph, &d, &id) != GS_OK) return 1;
        branches[k] = (gs_value){id, 0};
    }
    gs_node_desc s = {.name = "sum", .op_type = "Sum", .kernel = sum, .inputs = branches, .num_inputs = WIDTH,
                      .num_outputs = 1, .output_sizes = &bytes, .estimated_ns = 20000};
    if (gs_graph_add_node(graph, &s, &id) != GS_OK) return 1;
    output = (gs_value){id, 0};
    gs_executor_config ec = {.threads = 2};
    if (gs_graph_mark_output(graph, output) != GS_OK || gs_graph_finalize(graph) != GS_OK ||
        gs_pool_new(NULL, &pool) != GS_OK || gs_executor_new(&ec, &executor) != GS_OK) {
        fprintf(stderr, "server: %s\n", gs_last_error_message());
        return 1;
    }
    /* One request's bound: all six branches live at once, and the sum's output. */
    uint64_t budget = (WIDTH + 1) * bytes;
    if (gs_executor_set_memory_budget(executor, budget) != GS_OK) return 1;
    pthread_t threads[CLIENTS];
    for (int c = 0; c < CLIENTS; c++) pthread_create(&threads[c], NULL, client, (void *)(size_t)c);
    for (int c = 0; c < CLIENTS; c++) pthread_join(threads[c], NULL);
    /* The OS priority of the executor's threads only goes down (a nice value only up). */
    int lowered = gs_executor_set_background_nice(executor, 15) == GS_OK &&
                  gs_executor_set_background_nice(executor, 14) == GS_ERR_INVALID_ARGUMENT;
    printf("server: a nice value below the last: %s\n", gs_last_error_message());
    for (int c = 0; c < CLIENTS; c++) pthread_create(&threads[c], NULL, client, (void *)(size_t)c);
    for (int c = 0; c < CLIENTS; c++) pthread_join(threads[c], NULL);
    uint64_t set, reserved, peak;
    if (gs_executor_memory_budget(executor, &set, &reserved, &peak) != GS_OK) return 1;
    printf("server: %d requests from %d clients, budget %llu bytes, at most %llu reserved, %llu now, %d failures\n",
           2 * CLIENTS * REQUESTS, CLIENTS, (unsigned long long)set, (unsigned long long)peak,
           (unsigned long long)reserved, failures);
    /* A request that can never fit is refused at once, naming the bytes. */
    gs_executor_set_memory_budget(executor, bytes);
    _Alignas(16) float x[FLOATS] = {0};
    gs_input_binding bind = {.value = input, .tensor = {.data = x, .nbytes = sizeof x}};
    gs_run_options o = {.inputs = &bind, .num_inputs = 1, .executor = executor};
    gs_run_result *r;
    gs_status refused = gs_run(graph, pool, &o, &r);
    int named = refused == GS_ERR_MEMORY_LIMIT && strstr(gs_last_error_message(), "memory budget") != NULL;
    printf("server: a request larger than the budget: %s\n", gs_last_error_message());
    gs_executor_free(executor);
    gs_pool_free(pool);
    gs_graph_free(graph);
    return failures == 0 && peak <= budget && peak > 0 && reserved == 0 && named && lowered ? 0 : 1;
}
