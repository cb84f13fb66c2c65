/*
 * Per-node overhead of graphsched on the workloads of overhead_common.h (the same graphs the
 * oneTBB program runs): empty kernels, 16-byte outputs, one executor of $OH_THREADS threads
 * (default 2: the calling thread plus one worker) and one pool shared by all runs. Each graph is built and finalized
 * once, not timed; a run is gs_run + gs_result_free. One warm-up run, then the median of
 * OH_REPS repetitions. OH_SEQUENTIAL=1: no executor (sequential runs on the calling thread).
 * OH_FREEZE=1: runs keep the estimates as they are (no kernel is timed). OH_FORCE_EXECUTOR=1:
 * runs stay on the executor's threads (GS_RUN_FORCE_EXECUTOR) even where graphsched would run
 * them on the caller alone (a chain, or kernels too short to pay for the threads).
 * OH_NO_WALL_TIME=1: runs read no clock for their wall time (GS_RUN_NO_WALL_TIME).
 * OH_SCRATCH=N: each kernel also takes N bytes of scratch from the run's pool and gives them back
 * (gs_ctx_pool, gs_pool_acquire, gs_pool_release), as kernels that need temporaries do: what the
 * thread heaps cost a node, and a run's start (the settle visits heaps that hold free blocks).
 * OH_DEBUG=1: after the timed runs, prints the threads one more run used and the graph's
 * estimated total work and critical path (what decided it).
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c11 */
#include <graphsched.h>

#include "graph_build.h"

#include "overhead_common.h"

static size_t scratch_bytes = 0;

static int32_t empty(gs_kernel_ctx *c, void *u) {
  (void)u;
  if (scratch_bytes) {
    gs_pool *pool = gs_ctx_pool(c);
    void *p = NULL;
    if (gs_pool_acquire(pool, scratch_bytes, &p) != GS_OK) return 1;
    ((volatile char *)p)[0] = 1;
    if (gs_pool_release(pool, p) != GS_OK) return 1;
  }
  return 0;
}

static gs_graph *build(const oh_workload *w) {
  return gb_build_graph(w->num_nodes, w->pred_start, w->preds, "Empty", empty, NULL, 0);
}

/* One repetition's runs: what benches/c/instructions.sh counts. */
static OH_NOINLINE void oh_timed_runs(gs_graph *g, gs_pool *pool, const gs_run_options *opts,
                                      uint32_t runs) {
  for (uint32_t k = 0; k < runs; k++) {
    gs_run_result *res = NULL;
    gb_check(gs_run(g, pool, opts, &res), "gs_run");
    gs_result_free(res);
  }
}

static void bench(gs_executor *ex, gs_pool *pool, oh_workload *w) {
  uint64_t samples[OH_REPS];
  gs_graph *g = build(w);
  gs_run_options opts;
  gs_run_result *res = NULL;
  memset(&opts, 0, sizeof opts);
  opts.executor = ex; /* memory_limit_bytes, window, policy: 0 = defaults */
  /* OH_FREEZE=1: estimates stay as the warm-up left them (benches/c/instructions.sh: under
   * valgrind every kernel looks slow, the estimates move and each run recomputes priorities). */
  const char *freeze = getenv("OH_FREEZE");
  if (freeze && atoi(freeze)) opts.flags |= GS_RUN_FREEZE_ESTIMATES;
  /* OH_AUTO_PLAN=1: runs on the graph's own static plan (GS_RUN_AUTO_PLAN): one arena a run. */
  const char *auto_plan = getenv("OH_AUTO_PLAN");
  if (auto_plan && atoi(auto_plan)) opts.flags |= GS_RUN_AUTO_PLAN;
  /* OH_NO_WALL_TIME=1: runs read no clock for their wall time (GS_RUN_NO_WALL_TIME), as oneTBB's
   * graphs time nothing. */
  const char *untimed = getenv("OH_NO_WALL_TIME");
  if (untimed && atoi(untimed)) opts.flags |= GS_RUN_NO_WALL_TIME;
  const char *force = getenv("OH_FORCE_EXECUTOR");
  if (force && atoi(force)) opts.flags |= GS_RUN_FORCE_EXECUTOR;

  gb_check(gs_run(g, pool, &opts, &res), "gs_run (warm-up)");
  gs_result_free(res);
  for (int r = 0; r < OH_REPS; r++) {
    uint64_t t0 = oh_now_ns();
    oh_timed_runs(g, pool, &opts, w->runs_per_rep);
    samples[r] = oh_now_ns() - t0;
  }
  oh_report("graphsched", w, oh_median(samples, OH_REPS));
  const char *debug = getenv("OH_DEBUG");
  if (debug && atoi(debug)) {
    gs_run_stats st;
    gs_graph_info gi;
    gb_check(gs_run(g, pool, &opts, &res), "gs_run (debug)");
    gb_check(gs_result_stats(res, &st), "gs_result_stats");
    gs_result_free(res);
    gb_check(gs_graph_get_info(g, &gi), "gs_graph_get_info");
    fprintf(stderr, "%s: threads %llu, estimated work %llu ns, critical path %llu ns\n", w->name,
            (unsigned long long)st.threads, (unsigned long long)gi.total_work_ns,
            (unsigned long long)gi.critical_path_ns);
  }
  gs_graph_free(g);
  oh_free(w);
}

/* With an argument, only the workloads whose name contains it run (for profiling one). */
static const char *only = NULL;
static void maybe_bench(gs_executor *ex, gs_pool *pool, oh_workload *w) {
  if (only == NULL || strstr(w->name, only) != NULL)
    bench(ex, pool, w);
  else
    oh_free(w);
}

int main(int argc, char **argv) {
  only = argc > 1 ? argv[1] : NULL;
  const char *scratch = getenv("OH_SCRATCH");
  if (scratch) scratch_bytes = (size_t)atol(scratch);
  gs_executor_config cfg;
  gs_executor *ex = NULL;
  gs_pool *pool = NULL;
  oh_workload w;

  memset(&cfg, 0, sizeof cfg);
  cfg.threads = (uint32_t)oh_threads();
  /* OH_SEQUENTIAL=1: runs without an executor, in topological order on the calling thread. */
  const char *seq = getenv("OH_SEQUENTIAL");
  if (!(seq && atoi(seq))) gb_check(gs_executor_new(&cfg, &ex), "gs_executor_new");
  gb_check(gs_pool_new(NULL, &pool), "gs_pool_new");

  oh_chain(&w, 100000);
  maybe_bench(ex, pool, &w);
  oh_fanout(&w, 100000);
  maybe_bench(ex, pool, &w);
  oh_tree(&w, 1u << 15);
  maybe_bench(ex, pool, &w);
  oh_layered(&w, 8, 30, 1000);
  maybe_bench(ex, pool, &w);
  oh_single(&w, 10000);
  maybe_bench(ex, pool, &w);
  oh_pair(&w, 10000);
  maybe_bench(ex, pool, &w);

  gs_pool_free(pool);
  gs_executor_free(ex);
  return 0;
}
