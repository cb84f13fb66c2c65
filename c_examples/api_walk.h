/*
 * api_walk.h: the model that api_walk (api_walk.c, api_walk_model.c) checks the C API against.
 *
 * A Walk mirrors what exists during one seed: graphs (nodes, edges, graph outputs, finalized or
 * not), pools with the blocks acquired from them and the ones released, plans and the graph each
 * was made for, executors, results (size and checksum of every graph output, the caller memory
 * bound to the inputs), cancel tokens, and recently freed handles of every kind. Every status is
 * checked against what this model says include/graphsched.h and the README promise.
 * api_walk_model.c holds the PRNG, the checks, the kernel and the reference computation;
 * api_walk.c the actions, the walk and main.
 */
#ifndef API_WALK_H
#define API_WALK_H

#include <graphsched.h>
#include <stddef.h>
#include <stdint.h>

enum { MAXG = 3, MAXN = 10, MAXIN = 3, MAXOUT = 3, MAXP = 2, MAXB = 8, MAXPL = 3, MAXE = 2, MAXR = 4,
       MAXT = 2, MAXF = 8, MAXBYTES = 1536, STEPS = 150, DEFAULT_SEEDS = 1200 };
enum { K_GRAPH, K_POOL, K_PLAN, K_EXEC, K_RESULT, K_TOKEN, NKINDS };
enum fault { F_NONE, F_GRAPH_NULL, F_GRAPH_FREED, F_POOL_NULL, F_POOL_FREED, F_OUT_NULL, F_BIND_MISSING,
             F_BIND_TWICE, F_BIND_SIZE, F_BIND_ALIGN, F_BIND_NULL, F_BIND_NOT_INPUT, F_INPUTS_NULL, F_POLICY,
             F_FLAGS, F_EXEC_FREED, F_EXEC_WRONG_KIND, F_PLAN_FREED, F_SEQ_PLAN_EXEC, F_FOREIGN_PLAN, F_KERNEL,
             F_MEMORY_LIMIT, F_CANCELLED, F_NOT_FINALIZED, NFAULTS };

typedef struct {
    char name[16]; /* "g<tag>_n<id>" ("_x" for inputs): the tag makes names unique across graphs */
    uint32_t id, nin, nout, is_input;
    gs_value in[MAXIN];
    size_t in_bytes[MAXIN], size[MAXOUT], bytes[MAXOUT]; /* size: declared (or dynamic); bytes: produced */
    int marked[MAXOUT];
    uint64_t salt;
    const int *fail; /* the graph's node that must fail this run, or -1 */
} Node;
typedef struct { gs_graph *h; int fin, fail; uint32_t tag, n, ninputs; Node node[MAXN]; } Graph;
typedef struct { gs_pool *h; size_t threshold, bsz[MAXB]; int nblk, nstale; void *blk[MAXB], *stale[MAXB];
                 uint64_t bseed[MAXB]; } Pool;
typedef struct { gs_plan *h; gs_graph *graph; uint32_t mode, graph_tag, graph_n; } Plan;
typedef struct { gs_run_result *h; uint32_t n; Node node[MAXN]; uint64_t hash[MAXN][MAXOUT]; void *buf[MAXN]; } Result;
typedef struct { long status[32], fault[NFAULTS]; } Tally;
typedef struct {
    uint64_t seed, rng;
    int step, cancelled[MAXT], nfreed[NKINDS];
    uint32_t tags;
    char what[200];
    Tally *tally;
    Graph g[MAXG]; Pool p[MAXP]; Plan pl[MAXPL]; Result r[MAXR];
    gs_executor *e[MAXE];
    gs_cancel_token *t[MAXT];
    void *freed[NKINDS][MAXF];
} Walk;

/* Memory no pool handed out: foreign pointers, and a binding's data when any will do. */
extern const unsigned char outside[256];

/* Sets idx to a random i in [0, n) for which cond holds (reservoir sampling), or to -1. */
#define PICK(w, idx, n, cond)                                 \
    do {                                                      \
        uint32_t seen_ = 0;                                   \
        (idx) = -1;                                           \
        for (int i = 0; i < (int)(n); i++)                    \
            if ((cond) && pick((w), ++seen_) == 0) (idx) = i; \
    } while (0)

/* PRNG (splitmix64) and the byte patterns kernels and pool blocks are filled with. */
uint64_t mix64(uint64_t z);
uint64_t rnd(Walk *w);
uint32_t pick(Walk *w, uint32_t n);
int chance(Walk *w, int pct);
uint8_t fill_byte(uint64_t s, size_t i);
void fill(void *p, size_t n, uint64_t s);
uint64_t fnv(const void *p, size_t n);
uint64_t out_seed(const Node *p, uint32_t k, const uint64_t *h);

/* Checks: the first mismatch prints seed, step, action and call, and exits 1. */
_Noreturn void fail(const Walk *w, const char *fmt, ...);
void check(const Walk *w, int ok, const char *what);
void expect_status(const Walk *w, const char *call, int32_t got, int32_t want);
#define EXPECT(w, want, call) expect_status((w), #call, (int32_t)(call), (want))
/* For calls that report failure without a status (NULL, 0, -1): the message must be set. */
void expect_message(const Walk *w, int failed, const char *call);
void check_foreign_plan(Walk *w, int32_t got, const Plan *pl, const Graph *g);
void refuse(Walk *w, int kind, void *h);

/* Model bookkeeping shared by the actions. */
void remember(Walk *w, int kind, void *h);
void *pick_freed(Walk *w, int kind);
uint64_t pool_live(const Walk *w, gs_pool *pool);
void make_plan(Walk *w, const Graph *g, Plan *pl, uint32_t mode);
void release_block(Walk *w, Pool *p, int b);
void free_as(int kind, void *h);
void free_result(Walk *w, Result *res);

/* Every node's kernel, and what the values it computes must hold. */
int32_t kernel(gs_kernel_ctx *ctx, void *user);
int serial(const Graph *g);
void reference(const Graph *g, void *const *buf, uint64_t hash[MAXN][MAXOUT]);
void verify_result(Walk *w, const Result *res);
int first_marked(const Result *res, gs_value *v);

#endif /* API_WALK_H */
