// Per-node overhead of oneTBB's flow graph on the workloads of overhead_common.h: empty
// continue_node bodies, one make_edge per dependency, a task_arena of 2 threads (the calling
// thread plus one worker). Each run try_puts into every source and waits for the graph.
// Construction is not timed; one warm-up run, then the median of OH_REPS repetitions.
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/task_arena.h>

#include <memory>
#include <vector>

#include "overhead_common.h"

namespace flow = oneapi::tbb::flow;
using node_t = flow::continue_node<flow::continue_msg>;

// One repetition's runs: what benches/c/instructions.sh counts.
static OH_NOINLINE void oh_timed_runs(flow::graph &g, const std::vector<node_t *> &sources,
                                      uint32_t runs) {
  for (uint32_t k = 0; k < runs; k++) {
    for (node_t *s : sources) s->try_put(flow::continue_msg());
    g.wait_for_all();
  }
}

static void bench(oneapi::tbb::task_arena &arena, oh_workload *w) {
  uint64_t samples[OH_REPS];
  // The graph is built inside the arena so it attaches to it and its tasks run there.
  arena.execute([&] {
    flow::graph g;
    std::vector<std::unique_ptr<node_t>> nodes;
    std::vector<node_t *> sources;
    nodes.reserve(w->num_nodes);
    for (uint32_t i = 0; i < w->num_nodes; i++) {
      nodes.emplace_back(new node_t(g, [](const flow::continue_msg &) {}));
      if (w->pred_start[i] == w->pred_start[i + 1]) sources.push_back(nodes.back().get());
      for (uint32_t k = w->pred_start[i]; k < w->pred_start[i + 1]; k++)
        flow::make_edge(*nodes[w->preds[k]], *nodes[i]);
    }
    auto run = [&] {
      for (node_t *s : sources) s->try_put(flow::continue_msg());
      g.wait_for_all();
    };
    run();  // warm-up
    for (int r = 0; r < OH_REPS; r++) {
      uint64_t t0 = oh_now_ns();
      oh_timed_runs(g, sources, w->runs_per_rep);
      samples[r] = oh_now_ns() - t0;
    }
    // Tear down inside the arena too (nodes before the graph: reverse declaration order).
    nodes.clear();
  });
  oh_report("tbb", w, oh_median(samples, OH_REPS));
  oh_free(w);
}

// With an argument, only the workloads whose name contains it run (as overhead_graphsched).
static const char *only = nullptr;
static void maybe_bench(oneapi::tbb::task_arena &arena, oh_workload *w) {
  if (only == nullptr || strstr(w->name, only) != nullptr)
    bench(arena, w);
  else
    oh_free(w);
}

int main(int argc, char **argv) {
  only = argc > 1 ? argv[1] : nullptr;
  oneapi::tbb::task_arena arena(oh_threads());
  oh_workload w;
  oh_chain(&w, 100000);
  maybe_bench(arena, &w);
  oh_fanout(&w, 100000);
  maybe_bench(arena, &w);
  oh_tree(&w, 1u << 15);
  maybe_bench(arena, &w);
  oh_layered(&w, 8, 30, 1000);
  maybe_bench(arena, &w);
  oh_single(&w, 10000);
  maybe_bench(arena, &w);
  oh_pair(&w, 10000);
  maybe_bench(arena, &w);
  return 0;
}
