// oneTBB's side of the kernel-size benchmark (kernels_common.h says what it measures; the
// graphsched side is kernels_graphsched.c; benches/c/run_kernels.sh runs both in turns).
//
// Usage: kernels_tbb WORKLOAD [KERNEL_US]   (WORKLOAD: a name of ks_workloads[])
// A task_arena of $KS_THREADS threads in all (default 2: the calling thread and one worker);
// a flow::graph built once inside it, one continue_node per node whose body spins for the
// node's duration (the same ks_spin as graphsched's kernels), one make_edge per dependency. A
// run try_puts into every source and waits for the graph (wait_for_all).
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/task_arena.h>

#include <memory>
#include <vector>

#include "kernels_common.h"

namespace flow = oneapi::tbb::flow;
using node_t = flow::continue_node<flow::continue_msg>;

// One sample's runs (never inlined: a profiler can single them out).
__attribute__((noinline)) static void ks_timed_runs(flow::graph &g,
                                                    const std::vector<node_t *> &sources,
                                                    uint32_t runs) {
  for (uint32_t k = 0; k < runs; k++) {
    for (node_t *s : sources) s->try_put(flow::continue_msg());
    g.wait_for_all();
  }
}

int main(int argc, char **argv) {
  ks_workload w;
  if (argc < 2 || !ks_make(&w, argv[1], ks_kernel_us(argc, argv))) {
    fprintf(stderr, "usage: %s WORKLOAD [KERNEL_US]; workloads:", argv[0]);
    for (const char *name : ks_workloads) fprintf(stderr, " %s", name);
    fprintf(stderr, "\n");
    return 2;
  }
  int threads = ks_threads();
  oneapi::tbb::task_arena arena(threads);
  uint32_t runs = ks_runs_per_sample(&w, threads);
  uint64_t samples[KS_SAMPLES];
  // The graph is built inside the arena so that it attaches to it and its tasks run there.
  arena.execute([&] {
    flow::graph g;
    std::vector<std::unique_ptr<node_t>> nodes;
    std::vector<node_t *> sources;
    nodes.reserve(w.num_nodes);
    for (uint32_t i = 0; i < w.num_nodes; i++) {
      uint64_t ns = w.dur_ns[i];
      nodes.emplace_back(new node_t(g, [ns](const flow::continue_msg &) { ks_spin(ns); }));
      if (w.pred_start[i] == w.pred_start[i + 1]) sources.push_back(nodes.back().get());
      for (uint32_t k = w.pred_start[i]; k < w.pred_start[i + 1]; k++)
        flow::make_edge(*nodes[w.preds[k]], *nodes[i]);
    }
    for (int r = 0; r < KS_WARMUP; r++) ks_timed_runs(g, sources, runs);
    for (int r = 0; r < KS_SAMPLES; r++) {
      uint64_t t0 = ks_now_ns();
      ks_timed_runs(g, sources, runs);
      samples[r] = ks_now_ns() - t0;
    }
    // Torn down inside the arena too (nodes before the graph: reverse declaration order).
    nodes.clear();
  });
  ks_report("tbb", &w, threads, runs, samples);
  ks_free(&w);
  return 0;
}
