/*
 * Shared by kernels_graphsched.c and kernels_tbb.cpp (issue 40's kernel-size benchmark): the
 * workloads, the spinning kernel, the timer, how many runs a sample takes and the output line,
 * so that both programs run exactly the same graphs with exactly the same kernels. C11 and C++17.
 *
 * What it measures: the wall time of one run of a static DAG whose nodes spin for a given time
 * (1, 5 or 20 us: kernels short enough that a scheduler's cost per node shows), construction
 * excluded. The graph is built once and run many times; a sample is the time of `runs` runs in a
 * row, and a program prints the median of KS_SAMPLES samples (after KS_WARMUP samples' worth of
 * warm-up runs, which also let graphsched learn its kernels' durations).
 *
 * The workloads (`ks_make`), each a DAG in topological order (node i lists its predecessors, all
 * < i, in preds[pred_start[i] .. pred_start[i + 1]]) with a duration per node:
 * - layered16xW, W = 2, 8, 32: 16 layers of W nodes; node j of a layer depends on node j of the
 *   layer before and on 1-2 other nodes of it picked by a seeded generator (1 when W = 2);
 * - forkjoin: 1 -> 64 -> 1, eight times over (the join of one is the fork of the next): 521 nodes;
 * - random500: 500 nodes, node i >= 4 depends on 1-3 distinct nodes among the 48 before it,
 *   durations lognormal (sigma 1), scaled so that their mean is the kernel size, and clamped to
 *   [0.1, 20] times it.
 * Every other workload's nodes all spin for the kernel size.
 *
 * The kernel (`ks_spin`): reads CLOCK_MONOTONIC (vDSO, TSC-backed here) until its duration has
 * passed. Wall time, not work: a kernel whose thread is preempted ends when its time is up, so a
 * neighbour on the machine stretches both programs alike.
 */
#ifndef GS_KERNELS_COMMON_H
#define GS_KERNELS_COMMON_H

/* clock_gettime needs POSIX under -std=c11; a .c file defines this before its first include. */
#if !defined(__cplusplus) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 199309L
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Samples a program takes (it prints their median), warm-up samples before them, and about
 * how long one sample lasts (its run count follows from the workload's estimated run time). */
#define KS_SAMPLES 9
#define KS_WARMUP 1
#define KS_SAMPLE_NS 25000000ull

/* Threads in all, the calling thread included: $KS_THREADS, else 2. */
static int ks_threads(void) {
  const char *s = getenv("KS_THREADS");
  int n = s ? atoi(s) : 2;
  return n > 0 ? n : 2;
}

static uint64_t ks_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The kernel of every node in both programs: spins until `ns` nanoseconds have passed. */
static inline void ks_spin(uint64_t ns) {
  uint64_t end = ks_now_ns() + ns;
  while (ks_now_ns() < end) {
  }
}

typedef struct ks_workload {
  char name[40];      /* e.g. "layered16x8/5us" */
  uint32_t num_nodes;
  uint32_t *pred_start; /* num_nodes + 1 entries */
  uint32_t *preds;
  uint64_t *dur_ns;     /* each node's spin */
  uint64_t work_ns;     /* the sum of dur_ns */
  uint64_t path_ns;     /* the critical path */
} ks_workload;

static void *ks_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

static void ks_free(ks_workload *w) {
  free(w->pred_start);
  free(w->preds);
  free(w->dur_ns);
}

/* xorshift32, fixed seeds: every graph is the same on every run and in both programs. */
static uint32_t ks_rand(uint32_t *s) {
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

/* Adds `c` to the current node's predecessors unless already there; returns 1 if added. */
static int ks_add_pred(ks_workload *w, uint32_t *e, uint32_t first, uint32_t c) {
  for (uint32_t k = first; k < *e; k++)
    if (w->preds[k] == c) return 0;
  w->preds[(*e)++] = c;
  return 1;
}

static void ks_layered(ks_workload *w, uint32_t layers, uint32_t width) {
  uint32_t e = 0, seed = 0x9E3779B9u;
  for (uint32_t l = 0; l < layers; l++) {
    for (uint32_t j = 0; j < width; j++) {
      uint32_t id = l * width + j, first = e;
      if (l > 0) {
        uint32_t base = (l - 1) * width, extra = 1 + ks_rand(&seed) % 2;
        if (extra > width - 1) extra = width - 1;
        ks_add_pred(w, &e, first, base + j);
        while (e - first < 1 + extra) ks_add_pred(w, &e, first, base + ks_rand(&seed) % width);
      }
      w->pred_start[id + 1] = e;
    }
  }
}

/* `stages` times 1 -> `width` -> 1, each join the next stage's fork. */
static void ks_forkjoin(ks_workload *w, uint32_t stages, uint32_t width) {
  uint32_t e = 0, fork = 0, id = 1;
  w->pred_start[1] = 0;
  for (uint32_t s = 0; s < stages; s++) {
    uint32_t first_mid = id;
    for (uint32_t j = 0; j < width; j++, id++) {
      w->preds[e++] = fork;
      w->pred_start[id + 1] = e;
    }
    for (uint32_t j = 0; j < width; j++) w->preds[e++] = first_mid + j;
    w->pred_start[id + 1] = e;
    fork = id++;
  }
}

/* A uniform number in (0, 1) from the generator. */
static double ks_unit(uint32_t *s) { return ((double)ks_rand(s) + 1.0) / 4294967297.0; }

static void ks_random(ks_workload *w, uint64_t kernel_ns) {
  uint32_t e = 0, seed = 0x2545F491u;
  const uint32_t reach = 48;
  for (uint32_t i = 0; i < w->num_nodes; i++) {
    uint32_t first = e;
    if (i >= 4) {
      uint32_t want = 1 + ks_rand(&seed) % 3, lo = i > reach ? i - reach : 0;
      while (e - first < want) ks_add_pred(w, &e, first, lo + ks_rand(&seed) % (i - lo));
    }
    w->pred_start[i + 1] = e;
  }
  /* Lognormal, sigma 1 (Box-Muller), then scaled to the kernel size's mean and clamped. */
  double sum = 0, *raw = (double *)ks_xmalloc(sizeof(double) * w->num_nodes);
  for (uint32_t i = 0; i < w->num_nodes; i++) {
    double z = sqrt(-2.0 * log(ks_unit(&seed))) * cos(6.283185307179586 * ks_unit(&seed));
    raw[i] = exp(z);
    sum += raw[i];
  }
  for (uint32_t i = 0; i < w->num_nodes; i++) {
    double d = raw[i] / (sum / w->num_nodes) * (double)kernel_ns;
    if (d < 0.1 * (double)kernel_ns) d = 0.1 * (double)kernel_ns;
    if (d > 20.0 * (double)kernel_ns) d = 20.0 * (double)kernel_ns;
    w->dur_ns[i] = (uint64_t)d;
  }
  free(raw);
}

/* The workload names `ks_make` knows, in the order the script runs them. */
static const char *const ks_workloads[] = {"layered16x2", "layered16x8", "layered16x32", "forkjoin",
                                           "random500"};

/* Builds workload `name` with kernels of `kernel_us` microseconds; 0 if the name is unknown. */
static int ks_make(ks_workload *w, const char *name, uint32_t kernel_us) {
  uint64_t kernel_ns = (uint64_t)kernel_us * 1000u;
  uint32_t nodes, max_edges, width = 0;
  if (strcmp(name, "layered16x2") == 0) width = 2;
  else if (strcmp(name, "layered16x8") == 0) width = 8;
  else if (strcmp(name, "layered16x32") == 0) width = 32;
  if (width) {
    nodes = 16 * width;
    max_edges = nodes * 3;
  } else if (strcmp(name, "forkjoin") == 0) {
    nodes = 1 + 8 * (64 + 1);
    max_edges = 8 * 2 * 64;
  } else if (strcmp(name, "random500") == 0) {
    nodes = 500;
    max_edges = 500 * 3;
  } else {
    return 0;
  }
  snprintf(w->name, sizeof w->name, "%s/%uus", name, kernel_us);
  w->num_nodes = nodes;
  w->pred_start = (uint32_t *)ks_xmalloc(sizeof(uint32_t) * ((size_t)nodes + 1));
  w->preds = (uint32_t *)ks_xmalloc(sizeof(uint32_t) * (size_t)max_edges);
  w->dur_ns = (uint64_t *)ks_xmalloc(sizeof(uint64_t) * (size_t)nodes);
  w->pred_start[0] = 0;
  for (uint32_t i = 0; i < nodes; i++) w->dur_ns[i] = kernel_ns;
  if (width)
    ks_layered(w, 16, width);
  else if (name[0] == 'f')
    ks_forkjoin(w, 8, 64);
  else
    ks_random(w, kernel_ns);
  /* Total work and critical path (nodes are in topological order). */
  uint64_t *finish = (uint64_t *)ks_xmalloc(sizeof(uint64_t) * nodes);
  w->work_ns = 0;
  w->path_ns = 0;
  for (uint32_t i = 0; i < nodes; i++) {
    uint64_t start = 0;
    for (uint32_t k = w->pred_start[i]; k < w->pred_start[i + 1]; k++)
      if (finish[w->preds[k]] > start) start = finish[w->preds[k]];
    finish[i] = start + w->dur_ns[i];
    w->work_ns += w->dur_ns[i];
    if (finish[i] > w->path_ns) w->path_ns = finish[i];
  }
  free(finish);
  return 1;
}

/* Runs per sample: about KS_SAMPLE_NS of the ideal run time, max(work / threads, path); the
 * same in both programs. */
static uint32_t ks_runs_per_sample(const ks_workload *w, int threads) {
  uint64_t ideal = w->work_ns / (uint64_t)threads;
  if (w->path_ns > ideal) ideal = w->path_ns;
  uint64_t runs = KS_SAMPLE_NS / (ideal ? ideal : 1);
  return runs ? (uint32_t)runs : 1;
}

static int ks_cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* One line per workload: `<system> <workload> <us per run> us/run (<nodes> nodes, ideal <us>,
 * <runs> runs x median of <samples>)`. The ideal is max(work / threads, critical path). */
static void ks_report(const char *sys, const ks_workload *w, int threads, uint32_t runs,
                      uint64_t *samples) {
  qsort(samples, KS_SAMPLES, sizeof samples[0], ks_cmp_u64);
  uint64_t ideal = w->work_ns / (uint64_t)threads;
  if (w->path_ns > ideal) ideal = w->path_ns;
  printf("%-10s %-18s %10.2f us/run (%u nodes, ideal %.2f, %u runs x median of %d)\n", sys,
         w->name, (double)samples[KS_SAMPLES / 2] / 1000.0 / runs, w->num_nodes,
         (double)ideal / 1000.0, runs, KS_SAMPLES);
  fflush(stdout);
}

/* The kernel size of argv[2] in microseconds (default 1). */
static uint32_t ks_kernel_us(int argc, char **argv) {
  int us = argc > 2 ? atoi(argv[2]) : 1;
  return us > 0 ? (uint32_t)us : 1;
}

#endif /* GS_KERNELS_COMMON_H */
