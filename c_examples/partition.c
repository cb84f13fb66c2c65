/*
 * partition: an engine whose calls cost more than its short kernels asks graphsched which nodes
 * to run together, then runs one graphsched node per cluster.
 *
 * The model: two branches of four "add k" nodes over 64 floats, joined by a sum. Each node is
 * estimated at 1 us of which 0.8 us is the engine's fixed call cost. The cluster graph reads what
 * each cluster reads from outside, writes what is read outside it; a cluster's kernel runs its
 * members in order, keeping internal values in its own scratch. Its outputs must equal a run of
 * the original graph, node by node.
 */
#include <graphsched.h>
#include <stdio.h>
#include <string.h>

#define N 64
#define NODES 16 /* ids: 0 the input, then operators */

typedef struct {
    int is_sum; /* out = in0 + in1; otherwise out = in0 + add */
    float add;
    uint32_t inputs[2]; /* node ids read (each node has one output) */
    uint32_t num_inputs;
} node_spec;

static node_spec spec[NODES];
static uint32_t node_count; /* ids 1 .. node_count - 1 are operators */

static void compute(const node_spec *s, const float *const *in, float *out) {
    for (int i = 0; i < N; i++)
        out[i] = s->is_sum ? in[0][i] + in[1][i] : in[0][i] + s->add;
}

static int32_t node_kernel(gs_kernel_ctx *ctx, void *user) {
    const node_spec *s = user;
    const float *in[2];
    for (uint32_t i = 0; i < s->num_inputs; i++) in[i] = gs_ctx_input(ctx, i)->data;
    compute(s, in, gs_ctx_output(ctx, 0)->data);
    return 0;
}

/* A cluster: its members in topological order, the outside values it reads (one input slot
 * each) and the member values it writes out (one output each). */
typedef struct {
    const uint32_t *members;
    size_t count;
    uint32_t reads[NODES], num_reads;
    uint32_t writes[NODES], num_writes;
} cluster;

static uint32_t cluster_of[NODES];

static int32_t cluster_kernel(gs_kernel_ctx *ctx, void *user) {
    const cluster *c = user;
    float local[NODES][N]; /* internal values, by node id */
    for (size_t m = 0; m < c->count; m++) {
        uint32_t id = c->members[m];
        const float *in[2];
        for (uint32_t i = 0; i < spec[id].num_inputs; i++) {
            uint32_t from = spec[id].inputs[i];
            in[i] = local[from];
            for (uint32_t r = 0; r < c->num_reads; r++)
                if (c->reads[r] == from) in[i] = gs_ctx_input(ctx, r)->data;
        }
        compute(&spec[id], in, local[id]);
        for (uint32_t w = 0; w < c->num_writes; w++)
            if (c->writes[w] == id) memcpy(gs_ctx_output(ctx, w)->data, local[id], sizeof local[id]);
    }
    return 0;
}

static uint32_t add(uint32_t a, float k) {
    spec[node_count] = (node_spec){.add = k, .inputs = {a}, .num_inputs = 1};
    return node_count++;
}

#define CHECK(call)                                                                    \
    do {                                                                               \
        if ((call) != GS_OK) {                                                         \
            fprintf(stderr, "partition: %s: %s\n", #call, gs_last_error_message());    \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

/* Runs `g` once on `pool` and copies output `out` into `into`. */
static int run_once(gs_graph *g, gs_pool *pool, gs_executor *ex, gs_value bind_to, const float *x, gs_value out,
                    float *into) {
    gs_input_binding bind = {.value = bind_to, .tensor = {.data = (void *)x, .nbytes = N * sizeof(float)}};
    gs_run_options o = {.inputs = &bind, .num_inputs = 1, .executor = ex};
    gs_run_result *r;
    gs_tensor t;
    if (gs_run(g, pool, &o, &r) != GS_OK || gs_result_output(r, out, &t) != GS_OK) return 1;
    memcpy(into, t.data, N * sizeof(float));
    gs_result_free(r);
    return 0;
}

int main(void) {
    node_count = 1; /* node 0: the input */
    uint32_t a = 0, b = 0;
    for (int i = 0; i < 4; i++) {
        a = add(a, (float)(i + 1));
        b = add(b, (float)(10 * (i + 1)));
    }
    spec[node_count] = (node_spec){.is_sum = 1, .inputs = {a, b}, .num_inputs = 2};
    uint32_t sum = node_count++;

    size_t bytes = N * sizeof(float);
    gs_graph *g;
    gs_value x;
    CHECK(gs_graph_new(&g));
    CHECK(gs_graph_add_input(g, "x", bytes, &x));
    for (uint32_t id = 1; id < node_count; id++) {
        char name[16];
        snprintf(name, sizeof name, "n%u", (unsigned)id);
        gs_value in[2];
        for (uint32_t i = 0; i < spec[id].num_inputs; i++) in[i] = (gs_value){spec[id].inputs[i], 0};
        gs_node_desc d = {.name = name, .op_type = spec[id].is_sum ? "Sum" : "Add", .kernel = node_kernel,
                          .user_data = &spec[id], .inputs = in, .num_inputs = spec[id].num_inputs,
                          .num_outputs = 1, .output_sizes = &bytes, .estimated_ns = 1000};
        uint32_t got;
        CHECK(gs_graph_add_node(g, &d, &got));
        if (got != id) return 1;
    }
    CHECK(gs_graph_mark_output(g, (gs_value){sum, 0}));
    CHECK(gs_graph_finalize(g));

    /* Which nodes to run as one call, for calls of 0.8 us on 2 threads. */
    gs_partition_options po = {.call_cost_ns = 800, .threads = 2};
    gs_partition *p;
    gs_sim_result before, after;
    size_t count;
    CHECK(gs_partition_new(g, &po, &p));
    CHECK(gs_partition_cluster_count(p, &count));
    CHECK(gs_partition_simulated(p, &before, &after));
    printf("partition: %u nodes in %zu clusters; simulated %.1f us -> %.1f us on 2 threads\n",
           (unsigned)(node_count - 1), count, before.makespan_ns / 1e3, after.makespan_ns / 1e3);
    if (count < 1 || count >= node_count - 1 || after.makespan_ns >= before.makespan_ns) {
        fprintf(stderr, "partition: expected fewer calls and a shorter makespan\n");
        return 1;
    }
    gs_status bad = gs_partition_cluster(p, count, &(const uint32_t *){0}, &(size_t){0});
    if (bad != GS_ERR_INVALID_ARGUMENT) return 1;

    /* Each cluster's members, what it reads from outside and what it writes out. */
    static cluster clusters[NODES];
    for (size_t c = 0; c < count; c++) {
        CHECK(gs_partition_cluster(p, c, &clusters[c].members, &clusters[c].count));
        for (size_t m = 0; m < clusters[c].count; m++) cluster_of[clusters[c].members[m]] = (uint32_t)c;
    }
    for (uint32_t id = 1; id < node_count; id++) {
        for (uint32_t i = 0; i < spec[id].num_inputs; i++) {
            uint32_t from = spec[id].inputs[i];
            cluster *reader = &clusters[cluster_of[id]];
            if (from != 0 && cluster_of[from] == cluster_of[id]) continue;
            int known = 0;
            for (uint32_t r = 0; r < reader->num_reads; r++) known |= reader->reads[r] == from;
            if (!known) reader->reads[reader->num_reads++] = from;
            if (from == 0) continue;
            cluster *writer = &clusters[cluster_of[from]];
            known = 0;
            for (uint32_t w = 0; w < writer->num_writes; w++) known |= writer->writes[w] == from;
            if (!known) writer->writes[writer->num_writes++] = from;
        }
    }
    clusters[cluster_of[sum]].writes[clusters[cluster_of[sum]].num_writes++] = sum;

    /* The cluster graph: one node per cluster, in order (clusters come topologically sorted). */
    gs_graph *cg;
    gs_value cx, where[NODES]; /* where each written value lives in the cluster graph */
    CHECK(gs_graph_new(&cg));
    CHECK(gs_graph_add_input(cg, "x", bytes, &cx));
    size_t sizes[NODES];
    for (int i = 0; i < NODES; i++) sizes[i] = bytes;
    for (size_t c = 0; c < count; c++) {
        gs_value in[NODES];
        for (uint32_t r = 0; r < clusters[c].num_reads; r++)
            in[r] = clusters[c].reads[r] == 0 ? cx : where[clusters[c].reads[r]];
        char name[32];
        snprintf(name, sizeof name, "cluster%zu", c);
        gs_node_desc d = {.name = name, .op_type = "Cluster", .kernel = cluster_kernel, .user_data = &clusters[c],
                          .inputs = in, .num_inputs = clusters[c].num_reads,
                          .num_outputs = clusters[c].num_writes, .output_sizes = sizes};
        uint32_t id;
        CHECK(gs_graph_add_node(cg, &d, &id));
        for (uint32_t w = 0; w < clusters[c].num_writes; w++) where[clusters[c].writes[w]] = (gs_value){id, w};
    }
    CHECK(gs_graph_mark_output(cg, where[sum]));
    CHECK(gs_graph_finalize(cg));

    /* Both graphs, on 2 threads: the same answer. */
    float input[N], want[N], got[N];
    for (int i = 0; i < N; i++) input[i] = (float)i * 0.5f;
    gs_pool *pool;
    gs_executor *ex;
    gs_executor_config ec = {.threads = 2};
    CHECK(gs_pool_new(NULL, &pool));
    CHECK(gs_executor_new(&ec, &ex));
    if (run_once(g, pool, ex, x, input, (gs_value){sum, 0}, want) ||
        run_once(cg, pool, ex, cx, input, where[sum], got)) {
        fprintf(stderr, "partition: a run failed: %s\n", gs_last_error_message());
        return 1;
    }
    int ok = memcmp(want, got, sizeof want) == 0 && want[3] == 2 * 1.5f + 10 + 100;
    printf("partition: clusters give %s (sum[3] = %.1f)\n", ok ? "the same outputs" : "OTHER OUTPUTS", got[3]);
    gs_executor_free(ex);
    gs_pool_free(pool);
    gs_graph_free(cg);
    gs_partition_free(p);
    gs_graph_free(g);
    return ok ? 0 : 1;
}
