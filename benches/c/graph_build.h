/*
 * The graph both graphsched benchmark programs run (overhead_graphsched.c, kernels_graphsched.c):
 * a DAG given as predecessor lists (node i reads nodes preds[pred_start[i] ..
 * pred_start[i + 1]]), one graphsched node per DAG node with the same id, one 16-byte output
 * each, the sinks' outputs marked as graph outputs. Any failure prints graphsched's message and
 * exits.
 */
#ifndef GS_BENCH_GRAPH_BUILD_H
#define GS_BENCH_GRAPH_BUILD_H

#include <graphsched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void gb_check(gs_status s, const char *what) {
  if (s != GS_OK) {
    fprintf(stderr, "graphsched %s failed: %s: %s\n", what, gs_status_name(s), gs_last_error_message());
    exit(1);
  }
}

static void *gb_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

/* Node i's kernel gets `user_data + i * user_stride` (NULL when `user_data` is). */
static gs_graph *gb_build_graph(uint32_t num_nodes, const uint32_t *pred_start, const uint32_t *preds,
                                const char *op_type, gs_kernel_fn kernel, void *user_data, size_t user_stride) {
  gs_graph *g = NULL;
  static const size_t out_size[1] = {16};
  uint32_t max_in = 1;
  for (uint32_t i = 0; i < num_nodes; i++)
    if (pred_start[i + 1] - pred_start[i] > max_in) max_in = pred_start[i + 1] - pred_start[i];
  gs_value *ins = (gs_value *)gb_xmalloc(sizeof(gs_value) * max_in);
  uint8_t *has_consumer = (uint8_t *)gb_xmalloc(num_nodes);
  memset(has_consumer, 0, num_nodes);
  gb_check(gs_graph_new(&g), "gs_graph_new");
  for (uint32_t i = 0; i < num_nodes; i++) {
    char name[16];
    gs_node_desc d;
    uint32_t id = 0, k = 0;
    for (uint32_t e = pred_start[i]; e < pred_start[i + 1]; e++, k++) {
      ins[k].node = preds[e]; /* no graph inputs: node ids equal workload indices */
      ins[k].output = 0;
      has_consumer[preds[e]] = 1;
    }
    snprintf(name, sizeof name, "n%u", i);
    memset(&d, 0, sizeof d);
    d.name = name;
    d.op_type = op_type;
    d.kernel = kernel;
    d.user_data = user_data ? (char *)user_data + (size_t)i * user_stride : NULL;
    d.inputs = ins;
    d.num_inputs = k;
    d.num_outputs = 1;
    d.output_sizes = out_size;
    gb_check(gs_graph_add_node(g, &d, &id), "gs_graph_add_node");
    if (id != i) {
      fprintf(stderr, "unexpected node id %u for node %u\n", id, i);
      exit(1);
    }
  }
  /* The sinks' outputs are the graph outputs. */
  for (uint32_t i = 0; i < num_nodes; i++) {
    if (!has_consumer[i]) {
      gs_value v = {i, 0};
      gb_check(gs_graph_mark_output(g, v), "gs_graph_mark_output");
    }
  }
  gb_check(gs_graph_finalize(g), "gs_graph_finalize");
  free(ins);
  free(has_consumer);
  return g;
}

#endif
