/*
 * graphsched's side of the kernel-size benchmark (kernels_common.h says what it measures; the
 * oneTBB side is kernels_tbb.cpp; benches/c/run_kernels.sh runs both in turns).
 *
 * Usage: kernels_graphsched WORKLOAD [KERNEL_US]   (WORKLOAD: a name of ks_workloads[])
 * One executor of $KS_THREADS threads in all (default 2: the calling thread and one worker), one
 * pool; the graph is built and finalized once, every node a C kernel spinning for its duration
 * (its `user_data`), with one 16-byte output; the sinks' outputs are the graph's outputs. A run
 * is gs_run + gs_result_free. graphsched chooses between its threads and the caller as it does
 * for any user (its learned durations, no estimates given) unless KS_FORCE_EXECUTOR=1, which sets
 * GS_RUN_FORCE_EXECUTOR: every run goes through the executor's queues. KS_FREEZE=1 sets
 * GS_RUN_FREEZE_ESTIMATES (for diagnosis: what learning costs). KS_DEBUG=1 prints the
 * threads a run used (gs_run_stats.threads) to stderr.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c11 */
#include <graphsched.h>

#include "graph_build.h"

#include "kernels_common.h"

#define KS_NOINLINE __attribute__((noinline))

static int32_t spin(gs_kernel_ctx *c, void *user) {
  (void)c;
  ks_spin(*(const uint64_t *)user);
  return 0;
}

static gs_graph *build(const ks_workload *w) {
  return gb_build_graph(w->num_nodes, w->pred_start, w->preds, "Spin", spin, w->dur_ns, sizeof w->dur_ns[0]);
}

/* One sample's runs (never inlined: a profiler can single them out). */
static KS_NOINLINE void ks_timed_runs(gs_graph *g, gs_pool *pool, const gs_run_options *opts,
                                      uint32_t runs) {
  for (uint32_t k = 0; k < runs; k++) {
    gs_run_result *res = NULL;
    gb_check(gs_run(g, pool, opts, &res), "gs_run");
    gs_result_free(res);
  }
}

int main(int argc, char **argv) {
  ks_workload w;
  if (argc < 2 || !ks_make(&w, argv[1], ks_kernel_us(argc, argv))) {
    fprintf(stderr, "usage: %s WORKLOAD [KERNEL_US]; workloads:", argv[0]);
    for (size_t i = 0; i < sizeof ks_workloads / sizeof ks_workloads[0]; i++)
      fprintf(stderr, " %s", ks_workloads[i]);
    fprintf(stderr, "\n");
    return 2;
  }
  int threads = ks_threads();
  gs_executor_config cfg;
  gs_executor *ex = NULL;
  gs_pool *pool = NULL;
  memset(&cfg, 0, sizeof cfg);
  cfg.threads = (uint32_t)threads;
  gb_check(gs_executor_new(&cfg, &ex), "gs_executor_new");
  gb_check(gs_pool_new(NULL, &pool), "gs_pool_new");
  gs_graph *g = build(&w);

  gs_run_options opts;
  memset(&opts, 0, sizeof opts);
  opts.executor = ex;
  const char *force = getenv("KS_FORCE_EXECUTOR");
  if (force && atoi(force)) opts.flags |= GS_RUN_FORCE_EXECUTOR;
  /* KS_FREEZE=1 (a diagnosis, not the benchmark): runs keep the estimates the warm-up left
   * (GS_RUN_FREEZE_ESTIMATES), so no run times kernels or recomputes the priorities. */
  const char *freeze = getenv("KS_FREEZE");
  if (freeze && atoi(freeze)) opts.flags |= GS_RUN_FREEZE_ESTIMATES;

  uint32_t runs = ks_runs_per_sample(&w, threads);
  uint64_t samples[KS_SAMPLES];
  for (int r = 0; r < KS_WARMUP; r++) ks_timed_runs(g, pool, &opts, runs);
  for (int r = 0; r < KS_SAMPLES; r++) {
    uint64_t t0 = ks_now_ns();
    ks_timed_runs(g, pool, &opts, runs);
    samples[r] = ks_now_ns() - t0;
  }
  ks_report("graphsched", &w, threads, runs, samples);

  const char *debug = getenv("KS_DEBUG");
  if (debug && atoi(debug)) {
    gs_run_result *res = NULL;
    gs_run_stats st;
    gb_check(gs_run(g, pool, &opts, &res), "gs_run (debug)");
    gb_check(gs_result_stats(res, &st), "gs_result_stats");
    gs_result_free(res);
    fprintf(stderr, "%s: threads %llu\n", w.name, (unsigned long long)st.threads);
  }
  gs_graph_free(g);
  gs_pool_free(pool);
  gs_executor_free(ex);
  ks_free(&w);
  return 0;
}
