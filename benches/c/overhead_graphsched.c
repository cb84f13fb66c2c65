/*
 * Per-node overhead of graphsched on the workloads of overhead_common.h (the same graphs the
 * oneTBB program runs): empty kernels, 16-byte outputs, one executor of $OH_THREADS threads
 * (default 2: the calling thread plus one worker) and one pool shared by all runs. Each graph is built and finalized
 * once, not timed; a run is gs_run + gs_result_free. One warm-up run, then the median of
 * OH_REPS repetitions. OH_SEQUENTIAL=1: no executor (sequential runs on the calling thread).
 * OH_FREEZE=1: runs keep the estimates as they are (no kernel is timed). OH_FORCE_EXECUTOR=1:
 * runs stay on the executor's threads (GS_RUN_FORCE_EXECUTOR) even where graphsched would run
 * them on the caller alone (a chain, or kernels too short to pay for the threads).
 * OH_SCRATCH=N: each kernel also takes N bytes of scratch from the run's pool and gives them back
 * (gs_ctx_pool, gs_pool_acquire, gs_pool_release), as kernels that need temporaries do: what the
 * thread heaps cost a node, and a run's start (the settle visits heaps that hold free blocks).
 * OH_DEBUG=1: after the timed runs, prints the threads one more run used and the graph's
 * estimated total work and critical path (what decided it).
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c11 */
#include <graphsched.h>

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

static void check(gs_status s, const char *what) {
  if (s != GS_OK) {
    fprintf(stderr, "graphsched %s failed: %s: %s\n", what, gs_status_name(s),
            gs_last_error_message());
    exit(1);
  }
}

static gs_graph *build(const oh_workload *w) {
  gs_graph *g = NULL;
  static const size_t out_size[1] = {16};
  uint32_t max_in = 0;
  for (uint32_t i = 0; i < w->num_nodes; i++) {
    uint32_t k = w->pred_start[i + 1] - w->pred_start[i];
    if (k > max_in) max_in = k;
  }
  gs_value *ins = (gs_value *)oh_xmalloc(sizeof(gs_value) * (max_in ? max_in : 1));
  uint8_t *has_consumer = (uint8_t *)oh_xmalloc(w->num_nodes);
  memset(has_consumer, 0, w->num_nodes);
  check(gs_graph_new(&g), "gs_graph_new");
  for (uint32_t i = 0; i < w->num_nodes; i++) {
    char name[16];
    gs_node_desc d;
    uint32_t id = 0, k = 0;
    for (uint32_t e = w->pred_start[i]; e < w->pred_start[i + 1]; e++, k++) {
      ins[k].node = w->preds[e]; /* no graph inputs: node ids equal workload indices */
      ins[k].output = 0;
      has_consumer[w->preds[e]] = 1;
    }
    snprintf(name, sizeof name, "n%u", i);
    memset(&d, 0, sizeof d);
    d.name = name;
    d.op_type = "Empty";
    d.kernel = empty;
    d.inputs = ins;
    d.num_inputs = k;
    d.num_outputs = 1;
    d.output_sizes = out_size;
    check(gs_graph_add_node(g, &d, &id), "gs_graph_add_node");
    if (id != i) {
      fprintf(stderr, "unexpected node id %u for node %u\n", id, i);
      exit(1);
    }
  }
  /* The sinks' outputs are the graph outputs. */
  for (uint32_t i = 0; i < w->num_nodes; i++) {
    if (!has_consumer[i]) {
      gs_value v;
      v.node = i;
      v.output = 0;
      check(gs_graph_mark_output(g, v), "gs_graph_mark_output");
    }
  }
  check(gs_graph_finalize(g), "gs_graph_finalize");
  free(ins);
  free(has_consumer);
  return g;
}

/* One repetition's runs: what benches/c/instructions.sh counts. */
static OH_NOINLINE void oh_timed_runs(gs_graph *g, gs_pool *pool, const gs_run_options *opts,
                                      uint32_t runs) {
  for (uint32_t k = 0; k < runs; k++) {
    gs_run_result *res = NULL;
    check(gs_run(g, pool, opts, &res), "gs_run");
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
  const char *force = getenv("OH_FORCE_EXECUTOR");
  if (force && atoi(force)) opts.flags |= GS_RUN_FORCE_EXECUTOR;

  check(gs_run(g, pool, &opts, &res), "gs_run (warm-up)");
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
    check(gs_run(g, pool, &opts, &res), "gs_run (debug)");
    check(gs_result_stats(res, &st), "gs_result_stats");
    gs_result_free(res);
    check(gs_graph_get_info(g, &gi), "gs_graph_get_info");
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
  if (!(seq && atoi(seq))) check(gs_executor_new(&cfg, &ex), "gs_executor_new");
  check(gs_pool_new(NULL, &pool), "gs_pool_new");

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

  gs_pool_free(pool);
  gs_executor_free(ex);
  return 0;
}
