/*
 * parallel_chain: what gs_ctx_parallel_for buys a chain of heavy nodes, which offers no inter-op
 * parallelism. Eight 256 x 256 matrix products in a row, each node splitting its rows into
 * chunks of 8 over the executor's 2 threads ("split"), against the same graph whose nodes run
 * their rows as one chunk ("whole"); 5 rounds in turn, 10 runs each.
 * Build and run: cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DGRAPHSCHED_BUILD_BENCHMARKS=ON
 *   && cmake --build build-bench --target parallel_chain && build-bench/benches/c/parallel_chain
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <graphsched.h>
#include <stdio.h>
#include <time.h>
enum { N = 256 };
static float W[N][N];
struct rows { const float *in; float *out; };
static void mul(size_t b, size_t e, void *u) {
    const struct rows *r = u;
    for (size_t i = b; i < e; i++) for (size_t j = 0; j < N; j++) { float s = 0; for (size_t k = 0; k < N; k++) s += r->in[i*N+k]*W[k][j]; r->out[i*N+j] = s; }
}
static int32_t mm(gs_kernel_ctx *c, void *u) { struct rows r = {gs_ctx_input(c,0)->data, gs_ctx_output(c,0)->data}; return gs_ctx_parallel_for(c, 0, N, *(size_t*)u, mul, &r); }
static int32_t fill(gs_kernel_ctx *c, void *u) { (void)u; float *a = gs_ctx_output(c,0)->data; for (int i = 0; i < N*N; i++) a[i] = (i%7)*0.1f; return 0; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec*1e-9; }
int main(void) {
    for (int i = 0; i < N; i++) for (int j = 0; j < N; j++) W[i][j] = ((i+j)%5)*0.1f;
    size_t bytes = sizeof(float)*N*N, grain_split = 8, grain_whole = N; uint32_t prev, id;
    gs_graph *g[2];
    for (int v = 0; v < 2; v++) {
        gs_graph_new(&g[v]);
        gs_node_desc fd = {.name="fill", .kernel=fill, .num_outputs=1, .output_sizes=&bytes}; gs_graph_add_node(g[v], &fd, &prev);
        for (int k = 0; k < 8; k++) { char nm[8]; snprintf(nm, 8, "mm%d", k); gs_value in = {prev,0};
            gs_node_desc d = {.name=nm, .kernel=mm, .user_data = v ? &grain_split : &grain_whole, .inputs=&in, .num_inputs=1, .num_outputs=1, .output_sizes=&bytes}; gs_graph_add_node(g[v], &d, &id); prev = id; }
        gs_graph_mark_output(g[v], (gs_value){prev,0}); gs_graph_finalize(g[v]);
    }
    gs_pool *p; gs_pool_new(NULL, &p); gs_executor *ex; gs_executor_config cfg = {.threads=2}; gs_executor_new(&cfg, &ex);
    for (int round = 0; round < 5; round++) for (int v = 0; v < 2; v++) {
        gs_run_options o = {.executor = ex}; gs_run_result *r; double t0 = now();
        for (int i = 0; i < 10; i++) { gs_run(g[v], p, &o, &r); gs_result_free(r); }
        printf("%s %.2f ms/run\n", v ? "split (grain 8)  " : "whole (one chunk)", (now()-t0)*100);
    }
    return 0;
}
