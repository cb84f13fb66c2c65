/*
 * Shared by overhead_graphsched.c and overhead_tbb.cpp: the workload shapes, the timer, the
 * median and the output line, so both programs measure exactly the same graphs and print in
 * one format. C11 and C++17 compatible.
 *
 * A workload is a DAG in topological order: node i lists its predecessors (all < i) in
 * preds[pred_start[i] .. pred_start[i + 1]). Nodes without predecessors are the sources.
 */
#ifndef GS_OVERHEAD_COMMON_H
#define GS_OVERHEAD_COMMON_H

/* clock_gettime needs POSIX under -std=c11; a .c file defines this before its first include. */
#if !defined(__cplusplus) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 199309L
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OH_REPS 5

/* The timed runs of each repetition live in a function of this name, never inlined, so that
 * benches/c/instructions.sh can count the instructions they execute (valgrind --toggle-collect). */
#define OH_NOINLINE __attribute__((noinline))

/* Threads in all, the calling thread included: $OH_THREADS, else 2. */
static int oh_threads(void) {
  const char *s = getenv("OH_THREADS");
  int n = s ? atoi(s) : 2;
  return n > 0 ? n : 2;
}

typedef struct oh_workload {
  const char *name;   /* e.g. "chain_100k" */
  const char *unit;   /* "ns/node" or "us/run" */
  uint32_t num_nodes;
  uint32_t *pred_start; /* num_nodes + 1 entries */
  uint32_t *preds;
  uint32_t runs_per_rep; /* 1 for the big graphs, 1000 / 10000 for the re-run loops */
} oh_workload;

static void *oh_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

static void oh_init(oh_workload *w, const char *name, const char *unit, uint32_t nodes,
                    uint32_t max_edges, uint32_t runs) {
  w->name = name;
  w->unit = unit;
  w->num_nodes = nodes;
  w->pred_start = (uint32_t *)oh_xmalloc(sizeof(uint32_t) * ((size_t)nodes + 1));
  w->preds = (uint32_t *)oh_xmalloc(sizeof(uint32_t) * (size_t)max_edges);
  w->pred_start[0] = 0;
  w->runs_per_rep = runs;
}

static void oh_free(oh_workload *w) {
  free(w->pred_start);
  free(w->preds);
}

/* 1. chain: node i depends on node i-1. */
static void oh_chain(oh_workload *w, uint32_t n) {
  uint32_t e = 0;
  oh_init(w, "chain_100k", "ns/node", n, n, 1);
  for (uint32_t i = 0; i < n; i++) {
    if (i > 0) w->preds[e++] = i - 1;
    w->pred_start[i + 1] = e;
  }
}

/*
 * 2. fan-out/fan-in: 1 source -> `width` middle nodes -> join. graphsched caps a node at
 * GS_MAX_NODE_PORTS (65535) inputs, so one join of 100,000 inputs is impossible there; the
 * join is two nodes of width/2 inputs each, feeding one sink (1 -> width -> 2 -> 1). TBB runs
 * the identical shape.
 */
static void oh_fanout(oh_workload *w, uint32_t width) {
  uint32_t n = 1 + width + 2 + 1, e = 0, half = width / 2;
  oh_init(w, "fanout_100k", "ns/node", n, width * 2 + 2, 1);
  w->pred_start[1] = 0; /* node 0: the source */
  for (uint32_t i = 1; i <= width; i++) {
    w->preds[e++] = 0;
    w->pred_start[i + 1] = e;
  }
  for (uint32_t i = 1; i <= half; i++) w->preds[e++] = i; /* join A */
  w->pred_start[width + 2] = e;
  for (uint32_t i = half + 1; i <= width; i++) w->preds[e++] = i; /* join B */
  w->pred_start[width + 3] = e;
  w->preds[e++] = width + 1; /* sink */
  w->preds[e++] = width + 2;
  w->pred_start[width + 4] = e;
}

/*
 * 3. binary reduction tree: `leaves` leaves (nodes 0..leaves-1), then each level pairs up
 * the previous one; the root is last. leaves = 2^15 gives 2^16 - 1 nodes.
 */
static void oh_tree(oh_workload *w, uint32_t leaves) {
  uint32_t n = 2 * leaves - 1, e = 0, next = leaves, lvl_start = 0, lvl_len = leaves;
  oh_init(w, "tree_64k", "ns/node", n, 2 * leaves, 1);
  for (uint32_t i = 0; i < leaves; i++) w->pred_start[i + 1] = 0;
  while (lvl_len > 1) {
    for (uint32_t k = 0; k < lvl_len / 2; k++) {
      w->preds[e++] = lvl_start + 2 * k;
      w->preds[e++] = lvl_start + 2 * k + 1;
      w->pred_start[next + 1] = e;
      next++;
    }
    lvl_start += lvl_len;
    lvl_len /= 2;
  }
}

/* xorshift32, fixed seed: the layered graph is the same on every run and in both programs. */
static uint32_t oh_rand(uint32_t *s) {
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

/*
 * 4. layered: `layers` x `width` nodes; node j of layer l > 0 depends on node j of layer l-1
 * (so every node has a consumer and only the last layer are sinks) plus 1-2 other distinct
 * nodes of layer l-1 picked by a seeded generator: 2-3 predecessors each.
 */
static void oh_layered(oh_workload *w, uint32_t layers, uint32_t width, uint32_t runs) {
  uint32_t n = layers * width, e = 0, seed = 0x9E3779B9u;
  oh_init(w, "layered_240_x1k", "us/run", n, n * 3, runs);
  for (uint32_t l = 0; l < layers; l++) {
    for (uint32_t j = 0; j < width; j++) {
      uint32_t id = l * width + j;
      if (l > 0) {
        uint32_t base = (l - 1) * width, extra = 1 + oh_rand(&seed) % 2, got = 0;
        uint32_t picked[3];
        picked[got++] = j;
        while (got < 1 + extra) {
          uint32_t c = oh_rand(&seed) % width, dup = 0;
          for (uint32_t k = 0; k < got; k++) dup |= picked[k] == c;
          if (!dup) picked[got++] = c;
        }
        for (uint32_t k = 0; k < got; k++) w->preds[e++] = base + picked[k];
      }
      w->pred_start[id + 1] = e;
    }
  }
}

/* 5. one node, re-run: the round trip of a run. */
static void oh_single(oh_workload *w, uint32_t runs) {
  oh_init(w, "single_x10k", "us/run", 1, 1, runs);
  w->pred_start[1] = 0;
}

/* 6. two nodes, the second reading the first, re-run: a run's round trip plus one handover. */
static void oh_pair(oh_workload *w, uint32_t runs) {
  oh_init(w, "pair_x10k", "us/run", 2, 1, runs);
  w->pred_start[1] = 0;
  w->preds[0] = 0;
  w->pred_start[2] = 1;
}

static uint64_t oh_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int oh_cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static uint64_t oh_median(uint64_t *v, int n) {
  qsort(v, (size_t)n, sizeof v[0], oh_cmp_u64);
  return v[n / 2];
}

/* One line per workload: `<system> <workload> <value> <unit>`. */
static void oh_report(const char *sys, const oh_workload *w, uint64_t median_ns) {
  double v;
  if (strcmp(w->unit, "ns/node") == 0)
    v = (double)median_ns / (double)w->num_nodes;
  else
    v = (double)median_ns / 1000.0 / (double)w->runs_per_rep;
  printf("%-10s %-16s %10.3f %-8s (%u nodes, median of %d)\n", sys, w->name, v, w->unit,
         w->num_nodes, OH_REPS);
  fflush(stdout);
}

#endif /* GS_OVERHEAD_COMMON_H */
