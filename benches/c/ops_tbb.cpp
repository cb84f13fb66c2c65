// Intra-op and inter-op parallelism in oneTBB on the workloads of ops_common.h: the same kernels
// in a flow graph (one continue_node per node), heavy nodes splitting their rows with
// parallel_for (simple_partitioner, chunks of OPS_GRAIN rows: the chunks graphsched makes), in a
// task_arena of THREADS threads. Mode intra runs the nodes in topological order on the arena's
// calling thread instead of a flow graph. Buffers are allocated once, before the runs.
// Usage: [OPS_ONLY=chain|wide|mix] ops_tbb THREADS   (prints "tbb WORKLOAD MODE THREADS MS" lines, as ops_graphsched)
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_arena.h>

#include <memory>
#include <vector>

#include "ops_common.h"

namespace flow = oneapi::tbb::flow;
using node_t = flow::continue_node<flow::continue_msg>;

static bool split;

static void run_node(const ops_node &d, const float *in, float *out) {
  if (d.pred < 0) return ops_fill(out);
  if (!d.heavy || !split) return ops_matmul_rows(in, out, d.n, 0, (size_t)d.n);
  oneapi::tbb::parallel_for(
      oneapi::tbb::blocked_range<size_t>(0, (size_t)d.n, OPS_GRAIN),
      [&](const oneapi::tbb::blocked_range<size_t> &r) { ops_matmul_rows(in, out, d.n, r.begin(), r.end()); },
      oneapi::tbb::simple_partitioner());
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  ops_init_weights();
  const char *names[] = {"chain", "wide", "mix"};
  const char *modes[] = {"inter", "intra", "both"};
  oneapi::tbb::task_arena arena(threads);
  const char *only = getenv("OPS_ONLY");  // a workload's name: run only it
  for (const char *name : names) {
    if (only && strcmp(only, name) != 0) continue;
    static ops_graph spec;
    ops_make(&spec, name);
    std::vector<std::vector<float>> buf(spec.count);
    std::vector<int> has_succ(spec.count, 0);
    for (int i = 0; i < spec.count; i++) {
      buf[i].resize((size_t)spec.nodes[i].n * spec.nodes[i].n);
      if (spec.nodes[i].pred >= 0) has_succ[spec.nodes[i].pred] = 1;
    }
    auto body = [&](int i) {
      const ops_node &d = spec.nodes[i];
      run_node(d, d.pred < 0 ? nullptr : buf[d.pred].data(), buf[i].data());
    };
    for (int m = 0; m < 3; m++) {
      if (threads == 1 && m != 2) continue;
      split = m != 0;
      uint64_t samples[OPS_RUNS];
      double check = 0;
      arena.execute([&] {
        flow::graph g;
        std::vector<std::unique_ptr<node_t>> nodes;
        for (int i = 0; i < spec.count; i++) {
          nodes.emplace_back(new node_t(g, [&, i](const flow::continue_msg &) { body(i); }));
          if (spec.nodes[i].pred >= 0) flow::make_edge(*nodes[spec.nodes[i].pred], *nodes[i]);
        }
        auto run = [&] {
          if (m == 1) {
            for (int i = 0; i < spec.count; i++) body(i);  // ids are a topological order
          } else {
            nodes[0]->try_put(flow::continue_msg());
            g.wait_for_all();
          }
        };
        for (int r = -1; r < OPS_RUNS; r++) {
          uint64_t t0 = ops_now_ns();
          run();
          if (r >= 0) samples[r] = ops_now_ns() - t0;
        }
        nodes.clear();
      });
      for (int i = 0; i < spec.count; i++)
        if (!has_succ[i]) check += ops_sum(buf[i].data(), spec.nodes[i].n);
      printf("tbb %s %s %d %.3f check %.6e\n", name, modes[m], threads, ops_median(samples, OPS_RUNS) / 1e6, check);
      fflush(stdout);
    }
  }
  return 0;
}
