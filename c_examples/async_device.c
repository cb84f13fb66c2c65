/*
 * async_device: kernels that start work on a "device" and complete later (gs_ctx_defer,
 * gs_complete).
 *
 *   x -> scale1 .. scale8 (on the device) -> add1 .. add8 (on the CPU) -> sum
 *
 * The device is a thread with a queue. A scale kernel defers its node, queues the work and
 * returns at once, so the executor's threads run other nodes meanwhile. The device holds work
 * until three pieces are queued (or nothing came for a millisecond), then does them in a
 * pseudo-random order and completes each from its own thread. The sum must be exact on 2 threads
 * and on the calling thread alone, a window of 2 must hold at most 2 nodes on the device, a
 * failure reported by the device must fail the run naming the node, and misuse is refused.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread_cond_timedwait */
#include <graphsched.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "check.h"

enum { N = 1024, NODES = 8, QUEUE = 64 };

struct work {
    const float *in;
    float *out;
    float factor;
    int fail;
    gs_completion *done;
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t more;
    struct work queue[QUEUE];
    int queued, stop, in_flight, most_in_flight;
    unsigned seed;
} dev = {.lock = PTHREAD_MUTEX_INITIALIZER, .more = PTHREAD_COND_INITIALIZER, .seed = 12345};

static void *device_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&dev.lock);
    for (;;) {
        /* Hold work until three pieces are queued, or nothing came for a millisecond. */
        while (dev.queued < 3 && !dev.stop) {
            struct timespec t;
            clock_gettime(CLOCK_REALTIME, &t);
            t.tv_nsec += 1000000;
            if (t.tv_nsec >= 1000000000) t.tv_sec++, t.tv_nsec -= 1000000000;
            if (pthread_cond_timedwait(&dev.more, &dev.lock, &t) != 0 && dev.queued > 0) break;
        }
        if (dev.queued == 0) {
            if (dev.stop) break;
            continue;
        }
        /* Take one piece at random: completions come out of order. */
        dev.seed = dev.seed * 1103515245u + 12345u;
        int pick = (int)((dev.seed >> 16) % (unsigned)dev.queued);
        struct work w = dev.queue[pick];
        dev.queue[pick] = dev.queue[--dev.queued];
        pthread_mutex_unlock(&dev.lock);
        for (int i = 0; i < N; i++) w.out[i] = w.in[i] * w.factor;
        pthread_mutex_lock(&dev.lock);
        dev.in_flight--;
        pthread_mutex_unlock(&dev.lock);
        int32_t status = w.fail ? GS_ERR_IO : GS_OK;
        if (gs_complete(w.done, status, w.fail ? "the device lost power" : NULL) != GS_OK) {
            fprintf(stderr, "gs_complete: %s\n", gs_last_error_message());
            exit(1);
        }
        pthread_mutex_lock(&dev.lock);
    }
    pthread_mutex_unlock(&dev.lock);
    return NULL;
}

static int fail_node = -1; /* which scale node the device fails, if any */

static int32_t scale(gs_kernel_ctx *ctx, void *user) {
    int k = (int)(size_t)user;
    gs_completion *done;
    if (gs_ctx_defer(ctx, &done) != GS_OK) return 1;
    /* A second deferral of the same call is refused. */
    gs_completion *twice;
    if (gs_ctx_defer(ctx, &twice) != GS_ERR_INVALID_ARGUMENT) return 2;
    struct work w = {gs_ctx_input(ctx, 0)->data, gs_ctx_output(ctx, 0)->data, (float)(k + 1), k == fail_node, done};
    pthread_mutex_lock(&dev.lock);
    if (dev.queued == QUEUE) {
        pthread_mutex_unlock(&dev.lock);
        gs_complete(done, GS_ERR_OUT_OF_MEMORY, "device queue full");
        return 3;
    }
    dev.queue[dev.queued++] = w;
    if (++dev.in_flight > dev.most_in_flight) dev.most_in_flight = dev.in_flight;
    pthread_cond_signal(&dev.more);
    pthread_mutex_unlock(&dev.lock);
    return 0; /* pending: the device completes the node */
}

static int32_t add_one(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    const float *in = gs_ctx_input(ctx, 0)->data;
    float *out = gs_ctx_output(ctx, 0)->data;
    for (int i = 0; i < N; i++) out[i] = in[i] + 1.0f;
    return 0;
}

static int32_t sum(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    double total = 0;
    for (uint32_t k = 0; k < gs_ctx_num_inputs(ctx); k++) {
        const float *in = gs_ctx_input(ctx, k)->data;
        for (int i = 0; i < N; i++) total += in[i];
    }
    *(double *)gs_ctx_output(ctx, 0)->data = total;
    return 0;
}

int main(void) {
    pthread_t device;
    CHECK(pthread_create(&device, NULL, device_main, NULL) == 0, "no device thread");

    gs_graph *g;
    CHECK_OK(gs_graph_new(&g));
    gs_value x;
    CHECK_OK(gs_graph_add_input(g, "x", sizeof(float) * N, &x));
    size_t bytes = sizeof(float) * N, eight = sizeof(double);
    gs_value adds[NODES];
    for (int k = 0; k < NODES; k++) {
        char name[16];
        uint32_t s, a;
        snprintf(name, sizeof name, "scale%d", k + 1);
        gs_node_desc sd = {.name = name, .op_type = "DeviceScale", .kernel = scale, .user_data = (void *)(size_t)k,
                           .inputs = &x, .num_inputs = 1, .num_outputs = 1, .output_sizes = &bytes};
        CHECK_OK(gs_graph_add_node(g, &sd, &s));
        gs_value sv = {s, 0};
        snprintf(name, sizeof name, "add%d", k + 1);
        gs_node_desc ad = {.name = name, .op_type = "AddOne", .kernel = add_one, .inputs = &sv, .num_inputs = 1,
                           .num_outputs = 1, .output_sizes = &bytes};
        CHECK_OK(gs_graph_add_node(g, &ad, &a));
        adds[k] = (gs_value){a, 0};
    }
    gs_node_desc total_desc = {.name = "sum", .op_type = "Sum", .kernel = sum, .inputs = adds,
                               .num_inputs = NODES, .num_outputs = 1, .output_sizes = &eight};
    uint32_t t;
    CHECK_OK(gs_graph_add_node(g, &total_desc, &t));
    gs_value out = {t, 0};
    CHECK_OK(gs_graph_mark_output(g, out));
    CHECK_OK(gs_graph_finalize(g));

    static _Alignas(16) float input[N];
    double want = 0;
    for (int i = 0; i < N; i++) input[i] = (float)(i % 7) - 3.0f;
    for (int k = 0; k < NODES; k++)
        for (int i = 0; i < N; i++) want += (double)(input[i] * (float)(k + 1) + 1.0f);

    gs_pool *pool;
    gs_executor *ex;
    CHECK_OK(gs_pool_new(NULL, &pool));
    gs_executor_config cfg = {.threads = 2};
    CHECK_OK(gs_executor_new(&cfg, &ex));
    gs_input_binding bind = {.value = x, .tensor = {.data = input, .nbytes = sizeof input}};
    for (int run = 0; run < 12; run++) {
        /* Runs 0-3: executor; 4-7: executor, window 2; 8-11: the calling thread alone. */
        uint32_t window = run / 4 == 1 ? 2 : 0;
        gs_run_options opts = {.inputs = &bind, .num_inputs = 1, .executor = run < 8 ? ex : NULL, .window = window};
        dev.most_in_flight = 0;
        gs_run_result *res;
        CHECK_OK(gs_run(g, pool, &opts, &res));
        gs_tensor r;
        CHECK_OK(gs_result_output(res, out, &r));
        CHECK(*(double *)r.data == want, "run %d: sum %f, want %f", run, *(double *)r.data, want);
        if (window) CHECK(dev.most_in_flight <= 2, "window 2 but %d nodes on the device", dev.most_in_flight);
        if (run >= 8) CHECK(dev.most_in_flight == 1, "without an executor the run waits at each node");
        gs_result_free(res);
    }

    /* The device fails one node: the run fails naming it, after every completion came. */
    fail_node = 5;
    gs_run_options opts = {.inputs = &bind, .num_inputs = 1, .executor = ex};
    gs_run_result *res = NULL;
    CHECK(gs_run(g, pool, &opts, &res) == GS_ERR_KERNEL_FAILED, "the device's failure is the run's");
    CHECK(strstr(gs_last_error_message(), "'scale6'") && strstr(gs_last_error_message(), "lost power"),
          "message: %s", gs_last_error_message());
    CHECK(dev.in_flight == 0, "the run returned with %d nodes on the device", dev.in_flight);
    fail_node = -1;
    gs_pool_stats stats;
    CHECK_OK(gs_pool_get_stats(pool, &stats));
    CHECK(stats.live_bytes == 0, "%llu bytes still live", (unsigned long long)stats.live_bytes);

    /* Misuse: a completion that is not one, NULL. */
    CHECK(gs_complete((gs_completion *)&bind, GS_OK, NULL) == GS_ERR_INVALID_HANDLE, "garbage completion");
    CHECK(gs_complete(NULL, GS_OK, NULL) == GS_ERR_NULL_ARGUMENT, "NULL completion");

    pthread_mutex_lock(&dev.lock);
    dev.stop = 1;
    pthread_cond_signal(&dev.more);
    pthread_mutex_unlock(&dev.lock);
    pthread_join(device, NULL);
    printf("async_device: %d nodes per run completed by a device thread, out of order; sum exact\n", NODES);
    gs_executor_free(ex);
    gs_pool_free(pool);
    gs_graph_free(g);
    return 0;
}
