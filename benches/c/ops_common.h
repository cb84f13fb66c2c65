/*
 * The workloads of benches/c/run_ops.sh, shared by ops_graphsched.c and ops_tbb.cpp, so that
 * both run the same kernels on the same graphs.
 *
 * Kernels: a matrix product out = in x W, rows [begin, end), 16 columns at a time in registers
 * (ops_kernels.c). Heavy nodes multiply 256 x 256 matrices (about 17 M multiply-adds) and may
 * split their rows into chunks of OPS_GRAIN; light nodes multiply 48 x 48 ones (110 k) and never
 * split.
 *
 * Graphs (a source node fills the first matrix; every other node reads one predecessor):
 *   chain: 8 heavy nodes in a row: no inter-op parallelism, only intra-op can help;
 *   wide:  96 light nodes side by side after the source: only inter-op can help;
 *   mix:   a chain of 4 heavy nodes beside 96 light ones.
 *
 * Modes, at T threads:
 *   inter: nodes run side by side, heavy ones in one chunk;
 *   intra: one node at a time (graphsched: window 1; oneTBB: topological order on one thread),
 *          heavy ones split over the threads;
 *   both:  nodes side by side, heavy ones split.
 */
#ifndef GS_BENCH_OPS_COMMON_H
#define GS_BENCH_OPS_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OPS_HEAVY = 256, OPS_LIGHT = 48, OPS_GRAIN = 8, OPS_CHAIN = 8, OPS_WIDE = 96, OPS_MIX_CHAIN = 4 };
enum { OPS_RUNS = 7 }; /* timed runs per configuration and process; the median is printed */

/* One node: its size, whether it is heavy, and its predecessor (-1: the source). */
typedef struct ops_node {
    int n;
    int heavy;
    int pred;
} ops_node;

typedef struct ops_graph {
    const char *name;
    int count; /* nodes, the source (index 0) included */
    ops_node nodes[1 + OPS_WIDE + OPS_MIX_CHAIN];
} ops_graph;

#ifdef __cplusplus
extern "C" {
#endif
/* The kernels, in ops_kernels.c: one C translation unit linked into both programs, so that both
 * run the same machine code. */
void ops_init_weights(void);
/* Rows [begin, end) of out = in x W for n x n matrices; in is read from rows of at least n. */
void ops_matmul_rows(const float *in, float *out, int n, size_t begin, size_t end);
/* The source's output: the largest matrix, which every first node reads a prefix of. */
void ops_fill(float *out);
#ifdef __cplusplus
}
#endif

static inline size_t ops_bytes(const ops_node *d) { return sizeof(float) * (size_t)d->n * (size_t)d->n; }

static inline void ops_make(ops_graph *g, const char *name) {
    memset(g, 0, sizeof *g);
    g->name = name;
    g->nodes[0] = (ops_node){OPS_HEAVY, 0, -1};
    g->count = 1;
    int chain = strcmp(name, "chain") == 0 ? OPS_CHAIN : strcmp(name, "mix") == 0 ? OPS_MIX_CHAIN : 0;
    int wide = strcmp(name, "chain") == 0 ? 0 : OPS_WIDE;
    for (int k = 0; k < chain; k++, g->count++) g->nodes[g->count] = (ops_node){OPS_HEAVY, 1, g->count - 1};
    for (int k = 0; k < wide; k++, g->count++) g->nodes[g->count] = (ops_node){OPS_LIGHT, 0, 0};
}

static inline uint64_t ops_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline int ops_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static inline uint64_t ops_median(uint64_t *v, int n) {
    qsort(v, (size_t)n, sizeof *v, ops_cmp);
    return v[n / 2];
}

/* A checksum of a node's output, so both programs can be seen to compute the same thing. */
static inline double ops_sum(const float *m, int n) {
    double s = 0;
    for (int i = 0; i < n * n; i++) s += m[i];
    return s;
}

#endif
