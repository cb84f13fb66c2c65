/*
 * api_walk: a stateful property test of the C API, with misuse mixed in.
 *
 * Seeds 1..N (N = argv[1], default DEFAULT_SEEDS) each drive a splitmix64 PRNG through STEPS
 * weighted actions against the model of api_walk.h. Every status is checked against what the model
 * says include/graphsched.h and the README promise, and a failing call must leave a non-empty
 * gs_last_error_message(). The first mismatch prints seed, step, action and call, and exits 1.
 * Each seed ends by freeing everything (valgrind and LSan watch). This file holds the actions, the
 * action table, the walk and main; api_walk_model.c the PRNG, the checks, the kernel and the
 * reference computation.
 *
 * Actions: graph_new, add_input, add_node (multi-output, dynamic sizes, random DAG edges, in-place
 * and zero flags), mark_output, finalize, inspect (info, order, names, simulate), bad_graph (cycle,
 * dangling value, output index), run (with or without an executor, NULL or full options, plans,
 * memory limits, tokens, and at most one fault of enum fault), read_result, pool_new, acquire,
 * release (double, foreign, interior and result-owned pointers; trim), plan_new, executor_new,
 * token, free (any kind), freed_handles (freed handles and handles of another kind, freed again),
 * null_args.
 */
#include "api_walk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct { const char *name; int32_t status; } faults[NFAULTS] = {
    {"none", GS_OK}, {"graph NULL", GS_ERR_NULL_ARGUMENT}, {"graph freed", GS_ERR_INVALID_HANDLE},
    {"pool NULL", GS_ERR_NULL_ARGUMENT}, {"pool freed", GS_ERR_INVALID_HANDLE}, {"out NULL", GS_ERR_NULL_ARGUMENT},
    {"binding missing", GS_ERR_INPUT_BINDING}, {"bound twice", GS_ERR_INPUT_BINDING},
    {"binding of wrong size", GS_ERR_INPUT_BINDING}, {"misaligned binding", GS_ERR_INPUT_BINDING},
    {"binding to NULL", GS_ERR_INPUT_BINDING}, {"binding names a non-input", GS_ERR_INPUT_BINDING},
    {"inputs NULL with a count", GS_ERR_NULL_ARGUMENT}, {"bad policy", GS_ERR_INVALID_ARGUMENT},
    {"unknown flag", GS_ERR_INVALID_ARGUMENT}, {"executor freed", GS_ERR_INVALID_HANDLE},
    {"a pool as executor", GS_ERR_INVALID_HANDLE}, {"plan freed", GS_ERR_INVALID_HANDLE},
    {"sequential plan with an executor", GS_ERR_INVALID_ARGUMENT}, {"foreign plan", GS_ERR_INVALID_ARGUMENT},
    {"kernel fails", GS_ERR_KERNEL_FAILED}, {"memory limit below a node", GS_ERR_MEMORY_LIMIT},
    {"cancelled token", GS_ERR_CANCELLED}, {"graph not finalized", GS_ERR_NOT_FINALIZED}};

/* ---- graphs ---- */

static void act_graph_new(Walk *w) {
    int gi;
    PICK(w, gi, MAXG, !w->g[i].h);
    if (gi < 0) return;
    memset(&w->g[gi], 0, sizeof w->g[gi]);
    EXPECT(w, GS_OK, gs_graph_new(&w->g[gi].h));
    w->g[gi].tag = ++w->tags, w->g[gi].fail = -1;
}

static void act_add_input(Walk *w) {
    static const size_t sizes[] = {16, 32, 64, 200};
    int gi;
    PICK(w, gi, MAXG, w->g[i].h && !w->g[i].fin && w->g[i].n < MAXN);
    if (gi < 0) return;
    Graph *g = &w->g[gi];
    Node *p = &g->node[g->n];
    size_t nbytes = sizes[pick(w, 4)];
    gs_value v = {99, 99};
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "g%u_x%u", g->tag, g->n);
    switch (chance(w, 75) ? 0 : 1 + pick(w, 4)) {
    case 1: EXPECT(w, GS_ERR_EMPTY_NAME, gs_graph_add_input(g->h, "", nbytes, &v)); return;
    case 2: if (g->n) EXPECT(w, GS_ERR_DUPLICATE_NAME, gs_graph_add_input(g->h, g->node[pick(w, g->n)].name, 16, &v)); return;
    case 3: EXPECT(w, GS_ERR_SIZE_OVERFLOW, gs_graph_add_input(g->h, p->name, (size_t)PTRDIFF_MAX + 1, &v)); return;
    case 4: EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_graph_add_input(g->h, NULL, nbytes, &v)); return;
    }
    EXPECT(w, GS_OK, gs_graph_add_input(g->h, p->name, nbytes, &v));
    check(w, v.node == g->n && v.output == 0, "gs_graph_add_input gives value (next id, 0)");
    p->id = g->n++, p->is_input = p->nout = 1, p->size[0] = p->bytes[0] = nbytes, g->ninputs++;
}

static void mark(Walk *w, Graph *g, uint32_t node, uint32_t k) {
    EXPECT(w, GS_OK, gs_graph_mark_output(g->h, (gs_value){node, k})); /* marking twice is harmless */
    g->node[node].marked[k] = 1;
}

static void act_add_node(Walk *w) {
    static const size_t sizes[] = {16, 48, 100, 256, 1024, 1500}, too_big[2] = {16, (size_t)PTRDIFF_MAX + 1};
    int gi;
    PICK(w, gi, MAXG, w->g[i].h && !w->g[i].fin && w->g[i].n < MAXN);
    if (gi < 0) return;
    Graph *g = &w->g[gi];
    Node *p = &g->node[g->n];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "g%u_n%u", g->tag, g->n);
    p->id = g->n, p->salt = rnd(w), p->fail = &g->fail, p->nout = 1 + pick(w, MAXOUT);
    for (uint32_t k = 0; k < p->nout; k++) {
        p->size[k] = chance(w, 25) ? GS_SIZE_DYNAMIC : sizes[pick(w, 6)];
        p->bytes[k] = p->size[k] == GS_SIZE_DYNAMIC ? pick(w, 600) : p->size[k];
    }
    p->nin = g->n ? pick(w, MAXIN + 1) : 0;
    for (uint32_t j = 0; j < p->nin; j++) { /* edges to earlier nodes only: id order is topological */
        const Node *q = &g->node[pick(w, g->n)];
        uint32_t k = pick(w, q->nout);
        p->in[j] = (gs_value){q->id, k}, p->in_bytes[j] = q->bytes[k];
    }
    gs_node_desc d = {.name = p->name, .op_type = chance(w, 50) ? "Mix" : NULL, .kernel = kernel, .user_data = p,
                      .inputs = p->in, .num_inputs = p->nin, .num_outputs = p->nout, .output_sizes = p->size,
                      .estimated_ns = pick(w, 3) * 1000, .flags = chance(w, 20) ? GS_NODE_ZERO_OUTPUT : 0};
    if (p->nin && p->size[0] != GS_SIZE_DYNAMIC && chance(w, 30))
        d.flags |= GS_NODE_IN_PLACE, d.in_place_input = (uint16_t)pick(w, p->nin);
    int32_t want = GS_OK;
    uint32_t id = 999;
    switch (chance(w, 80) ? 0 : 1 + pick(w, 8)) {
    case 1: d.name = "", want = GS_ERR_EMPTY_NAME; break;
    case 2: if (g->n) d.name = g->node[pick(w, g->n)].name, want = GS_ERR_DUPLICATE_NAME; break;
    case 3: d.num_outputs = 0, want = GS_ERR_INVALID_ARGUMENT; break;
    case 4: d.kernel = NULL, want = GS_ERR_NULL_ARGUMENT; break;
    case 5: d.flags |= 4u << pick(w, 29), want = GS_ERR_INVALID_ARGUMENT; break;
    case 6: d.output_sizes = too_big, d.num_outputs = 2, want = GS_ERR_SIZE_OVERFLOW; break;
    case 7: d.flags |= GS_NODE_IN_PLACE, d.in_place_input = (uint16_t)p->nin, want = GS_ERR_INVALID_ARGUMENT; break;
    case 8: EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_graph_add_node(g->h, NULL, &id)); return;
    }
    EXPECT(w, want, gs_graph_add_node(g->h, &d, &id));
    if (want != GS_OK) return;
    check(w, id == g->n++, "gs_graph_add_node gives the next id");
    if (chance(w, 50)) mark(w, g, p->id, pick(w, p->nout));
}

static void act_mark_output(Walk *w) {
    int gi;
    PICK(w, gi, MAXG, w->g[i].h && !w->g[i].fin && w->g[i].n);
    if (gi < 0) return;
    uint32_t node = pick(w, w->g[gi].n);
    mark(w, &w->g[gi], node, pick(w, w->g[gi].node[node].nout));
}

static void act_finalize(Walk *w) {
    int gi;
    size_t sz = 16;
    gs_node_desc d = {.name = "late", .kernel = kernel, .num_outputs = 1, .output_sizes = &sz};
    PICK(w, gi, MAXG, w->g[i].h && (w->g[i].fin || w->g[i].n >= 5 || chance(w, 5)));
    if (gi < 0) return;
    Graph *g = &w->g[gi];
    if (!g->fin) {
        EXPECT(w, GS_OK, gs_graph_finalize(g->h));
        g->fin = 1;
        return;
    }
    EXPECT(w, GS_ERR_FINALIZED, gs_graph_finalize(g->h));
    EXPECT(w, GS_ERR_FINALIZED, gs_graph_add_node(g->h, &d, NULL));
    EXPECT(w, GS_ERR_FINALIZED, gs_graph_add_input(g->h, "late", 16, NULL));
    EXPECT(w, GS_ERR_FINALIZED, gs_graph_mark_output(g->h, (gs_value){0, 0}));
}

static void act_inspect(Walk *w) {
    int gi, open;
    gs_graph_info info; gs_sim_result sim; uint32_t id; uint64_t edges = 0, outputs = 0;
    gs_sim_options so = {.threads = 1 + pick(w, 4), .policy = pick(w, 4)};
    PICK(w, gi, MAXG, w->g[i].h);
    if (gi < 0) return;
    Graph *g = &w->g[gi];
    EXPECT(w, GS_ERR_UNKNOWN_VALUE, gs_graph_find_node(g->h, "nobody", &id));
    expect_message(w, gs_graph_node_name(g->h, g->n) == NULL, "gs_graph_node_name(graph, past the last id)");
    for (uint32_t i = 0; i < g->n; i++)
        for (uint32_t k = 0; k < g->node[i].nout; k++) outputs += g->node[i].marked[k] != 0, edges += k ? 0 : g->node[i].nin;
    open = g->fin ? GS_OK : GS_ERR_NOT_FINALIZED;
    EXPECT(w, open, gs_graph_get_info(g->h, &info));
    EXPECT(w, open, gs_simulate(g->h, &so, &sim));
    check(w, !g->fin || (info.num_nodes == g->n && info.num_inputs == g->ninputs && info.num_outputs == outputs &&
                         info.num_edges == edges && sim.nodes_run == g->n - g->ninputs),
          "gs_graph_info and gs_simulate match the model");
}

/* A throwaway graph with a mistake finalize must report: 0 a dangling value (then added, and it
 * finalizes), 1 an output index, 2 a cycle, 3 a self-loop, 4 a graph output that does not exist. */
static void act_bad_graph(Walk *w) {
    static const gs_value reads[] = {{1, 0}, {0, 5}, {1, 0}, {0, 0}};
    static const int32_t want[] = {GS_ERR_UNKNOWN_VALUE, GS_ERR_OUTPUT_INDEX, GS_ERR_CYCLE, GS_ERR_CYCLE,
                                   GS_ERR_UNKNOWN_VALUE};
    uint32_t v = pick(w, 5);
    size_t sz = 16;
    gs_graph *g;
    gs_node_desc a = {.name = "a", .kernel = kernel, .inputs = &reads[v % 4], .num_inputs = v != 1 && v != 4,
                      .num_outputs = 1, .output_sizes = &sz};
    gs_node_desc b = {.name = "b", .kernel = kernel, .inputs = &reads[v == 2 ? 3 : 1], .num_inputs = v == 1 || v == 2,
                      .num_outputs = 1, .output_sizes = &sz};
    EXPECT(w, GS_OK, gs_graph_new(&g));
    EXPECT(w, GS_OK, gs_graph_add_node(g, &a, NULL));
    if (v == 1 || v == 2) EXPECT(w, GS_OK, gs_graph_add_node(g, &b, NULL));
    if (v == 4) EXPECT(w, GS_OK, gs_graph_mark_output(g, (gs_value){7, 0}));
    EXPECT(w, want[v], gs_graph_finalize(g));
    EXPECT(w, want[v], gs_graph_finalize(g)); /* a failed finalize changed nothing */
    if (v == 0) EXPECT(w, GS_OK, gs_graph_add_node(g, &b, NULL)), EXPECT(w, GS_OK, gs_graph_finalize(g));
    gs_graph_free(g);
    remember(w, K_GRAPH, g);
}

/* ---- runs and results ---- */

static void act_run(Walk *w) {
    int gi, pi, ei, pli, ti, oi, fi = -1, fault = F_NONE;
    PICK(w, gi, MAXG, w->g[i].h && w->g[i].fin);
    if ((gi < 0 && chance(w, 10)) || chance(w, 3)) PICK(w, gi, MAXG, w->g[i].h && !w->g[i].fin);
    PICK(w, pi, MAXP, w->p[i].h);
    if (gi < 0 || pi < 0) return;
    Graph *g = &w->g[gi];
    gs_graph *graph = g->h;
    gs_pool *pool = w->p[pi].h;
    uint32_t nops = g->n - g->ninputs;
    uint64_t total = 1, need = 0; /* room for every value at once; the most one node's static outputs take */
    void *buf[MAXN] = {0};
    gs_input_binding bind[MAXN + 1], tmp;
    size_t nb = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        const Node *p = &g->node[i];
        uint64_t own = 0;
        if (p->is_input) {
            buf[i] = aligned_alloc(GS_ALIGNMENT, (p->bytes[0] + 31) / 16 * 16); /* 16 spare bytes */
            fill(buf[i], p->bytes[0], rnd(w));
            bind[nb++] = (gs_input_binding){{i, 0}, {.data = buf[i], .nbytes = p->bytes[0]}};
        }
        for (uint32_t k = 0; k < p->nout && !p->is_input; k++)
            total += p->bytes[k], own += p->size[k] == GS_SIZE_DYNAMIC ? 0 : p->size[k];
        need = own > need ? own : need;
    }
    for (size_t i = nb; i > 1; i--) { /* bindings come in any order */
        uint32_t j = pick(w, (uint32_t)i);
        tmp = bind[i - 1], bind[i - 1] = bind[j], bind[j] = tmp;
    }
    gs_run_options o = {.inputs = bind, .num_inputs = nb, .window = pick(w, 4), .policy = pick(w, 4), .flags = pick(w, 32)};
    const gs_run_options *opts = nb == 0 && chance(w, 30) ? NULL : &o;
    PICK(w, ei, MAXE, w->e[i]);
    if (ei >= 0 && chance(w, 60)) o.executor = w->e[ei];
    PICK(w, pli, MAXPL, w->pl[i].h && w->pl[i].graph == graph);
    int scheduled = 0; /* a scheduled plan refuses a memory limit: none is given with one */
    if (pli >= 0 && chance(w, 50)) {
        o.plan = w->pl[pli].h;
        if (w->pl[pli].mode < GS_PLAN_PARALLEL_SAFE) o.executor = NULL; /* sequential plans: no executor */
        scheduled = w->pl[pli].mode == GS_PLAN_SCHEDULED;
    }
    if (chance(w, 25) && !scheduled) o.memory_limit_bytes = total;
    PICK(w, ti, MAXT, w->t[i] && !w->cancelled[i]);
    if (ti >= 0 && chance(w, 25)) o.cancel = w->t[ti];
    gs_run_result *r = NULL, **out = &r;
    if (!g->fin) fault = F_NOT_FINALIZED;
    for (int tries = chance(w, 45) ? 0 : 4; fault == F_NONE && tries > 0; tries--) {
        uint32_t any = nb ? pick(w, (uint32_t)nb) : 0;
        switch (fault = (int)pick(w, F_NOT_FINALIZED)) {
        case F_GRAPH_NULL: graph = NULL; break;
        case F_GRAPH_FREED: if (!(graph = pick_freed(w, K_GRAPH))) graph = g->h, fault = F_NONE; break;
        case F_POOL_NULL: pool = NULL; break;
        case F_POOL_FREED: if (!(pool = pick_freed(w, K_POOL))) pool = w->p[pi].h, fault = F_NONE; break;
        case F_OUT_NULL: out = NULL; break;
        case F_BIND_MISSING: if (nb) o.num_inputs = nb - 1, opts = chance(w, 30) ? NULL : &o; else fault = F_NONE; break;
        case F_BIND_TWICE: if (nb && nb < g->n) bind[nb] = bind[any], o.num_inputs = nb + 1; else fault = F_NONE; break;
        case F_BIND_SIZE: if (nb) bind[any].tensor.nbytes += chance(w, 50) ? 16 : (size_t)-1; else fault = F_NONE; break;
        case F_BIND_ALIGN: if (nb) bind[any].tensor.data = (char *)bind[any].tensor.data + 8; else fault = F_NONE; break;
        case F_BIND_NULL: if (nb) bind[any].tensor.data = NULL; else fault = F_NONE; break;
        case F_BIND_NOT_INPUT: { /* an operator's value, output 1 of an input, a node that does not exist */
            if (!g->n) { fault = F_NONE; break; }
            PICK(w, fi, g->n, !g->node[i].is_input);
            gs_value v = fi >= 0 && chance(w, 50) ? (gs_value){(uint32_t)fi, 0}
                         : nb && chance(w, 50)    ? (gs_value){bind[any].value.node, 1}
                                                  : (gs_value){g->n + pick(w, 5), 0};
            if (!nb) bind[0] = (gs_input_binding){v, {.data = (void *)outside, .nbytes = 16}}, o.num_inputs = 1;
            bind[any].value = v, opts = &o;
            break;
        }
        case F_INPUTS_NULL: if (g->n) o.inputs = NULL, o.num_inputs = nb ? nb : 1, opts = &o; else fault = F_NONE; break;
        case F_POLICY: o.policy = 4 + pick(w, 100), opts = &o; break;
        case F_FLAGS: o.flags |= 32u << pick(w, 26), opts = &o; break;
        case F_EXEC_FREED: if ((o.executor = pick_freed(w, K_EXEC))) o.plan = NULL, opts = &o; else fault = F_NONE; break;
        case F_EXEC_WRONG_KIND: o.executor = (gs_executor *)(void *)w->p[pi].h, o.plan = NULL, opts = &o; break;
        case F_PLAN_FREED: if ((o.plan = pick_freed(w, K_PLAN))) opts = &o; else fault = F_NONE; break;
        case F_SEQ_PLAN_EXEC:
            PICK(w, fi, MAXPL, w->pl[i].h && w->pl[i].graph == graph && w->pl[i].mode < GS_PLAN_PARALLEL_SAFE);
            if (fi >= 0 && ei >= 0) o.plan = w->pl[fi].h, o.executor = w->e[ei], opts = &o; else fault = F_NONE;
            break;
        case F_FOREIGN_PLAN: /* between graphs with nodes, so that the message can name them */
            PICK(w, fi, MAXPL, w->pl[i].h && w->pl[i].graph != graph && w->pl[i].graph_n);
            if (fi < 0) { /* plan another graph now */
                PICK(w, oi, MAXG, w->g[i].h && w->g[i].fin && w->g[i].n && i != gi);
                PICK(w, fi, MAXPL, !w->pl[i].h);
                if (oi >= 0 && fi >= 0) make_plan(w, &w->g[oi], &w->pl[fi], pick(w, 3)); else fi = -1;
            }
            if (fi >= 0 && g->n) o.plan = w->pl[fi].h, o.executor = NULL, opts = &o; else fault = F_NONE;
            break;
        case F_KERNEL: PICK(w, fi, g->n, !g->node[i].is_input); if (fi >= 0) g->fail = fi; else fault = F_NONE; break;
        case F_MEMORY_LIMIT: if (need > 1 && !scheduled) o.memory_limit_bytes = need - 1, opts = &o; else fault = F_NONE; break;
        case F_CANCELLED:
            PICK(w, fi, MAXT, w->t[i]);
            if (fi < 0 || !nops) { fault = F_NONE; break; }
            check(w, gs_cancel_token_cancel(w->t[fi]) == !w->cancelled[fi], "gs_cancel_token_cancel: 1, then 0");
            w->cancelled[fi] = 1, o.cancel = w->t[fi], opts = &o;
            break;
        }
    }
    snprintf(w->what, sizeof w->what, "run of g%u (%u nodes, %u inputs), fault: %s%s%s%s%s", g->tag, g->n, g->ninputs,
             faults[fault].name, opts && o.executor ? ", executor" : "", opts && o.plan ? ", plan" : "",
             opts && o.memory_limit_bytes ? ", memory limit" : "", opts ? "" : ", NULL options");
    uint64_t live = pool_live(w, w->p[pi].h);
    int32_t st = gs_run(graph, pool, opts, out);
    int failing = g->fail;
    g->fail = -1, w->tally->fault[fault]++;
    if (fault == F_FOREIGN_PLAN)
        check_foreign_plan(w, st, &w->pl[fi], g);
    else
        expect_status(w, "gs_run(graph, pool, options, &result)", st, faults[fault].status);
    if (fault == F_KERNEL && (!strstr(gs_last_error_message(), g->node[failing].name) || !strstr(gs_last_error_message(), "boom")))
        fail(w, "a kernel failure must name the node '%s' and quote gs_ctx_set_error", g->node[failing].name);
    if (st != GS_OK) {
        check(w, r == NULL && pool_live(w, w->p[pi].h) == live, "a failed run leaves *out alone and gives every buffer back");
        for (uint32_t i = 0; i < g->n; i++) free(buf[i]);
        return;
    }
    Result res = {.h = r, .n = g->n};
    gs_run_stats s;
    memcpy(res.node, g->node, sizeof res.node), memcpy(res.buf, buf, sizeof res.buf);
    reference(g, buf, res.hash);
    verify_result(w, &res);
    EXPECT(w, GS_OK, gs_result_stats(r, &s));
    /* On the executor when asked (a memory limit, GS_RUN_FORCE_EXECUTOR); never for a serial graph
     * otherwise; else as the graph's estimates say (src/sched/spread.rs), which the model does
     * not follow: on either. */
    int forced = opts && o.executor && (o.memory_limit_bytes || (o.flags & GS_RUN_FORCE_EXECUTOR));
    int may = opts && o.executor && !serial(g);
    uint64_t threads = opts && o.executor ? gs_executor_threads(o.executor) : 1;
    check(w, s.nodes_run == nops && (forced ? s.threads == threads : may ? s.threads == threads || s.threads == 1 : s.threads == 1),
          "gs_run_stats: every operator ran, on the executor's threads (a serial graph, or one of short kernels, on its caller's)");
    check(w, !(opts && (o.flags & GS_RUN_NO_WALL_TIME)) || s.wall_ns == 0, "gs_run_stats: a run asked to read no clock reports no wall time");
    EXPECT(w, opts && (o.flags & GS_RUN_TRACE) ? GS_ERR_IO : GS_ERR_INVALID_ARGUMENT,
           gs_result_write_trace(r, "/nonexistent-dir/api_walk.json"));
    PICK(w, fi, MAXR, !w->r[i].h);
    if (fi >= 0) {
        w->r[fi] = res;
        return;
    }
    gs_result_free(r);
    remember(w, K_RESULT, r);
    for (uint32_t i = 0; i < g->n; i++) free(buf[i]);
}

static void act_read_result(Walk *w) {
    int ri;
    gs_tensor t; gs_run_stats s; gs_value v;
    void *gone = pick_freed(w, K_RESULT);
    PICK(w, ri, MAXR, w->r[i].h);
    if (ri < 0 || (gone && chance(w, 15))) {
        if (gone) EXPECT(w, GS_ERR_INVALID_HANDLE, gs_result_output(gone, (gs_value){0, 0}, &t)),
                  EXPECT(w, GS_ERR_INVALID_HANDLE, gs_result_stats(gone, &s));
        return;
    }
    Result *res = &w->r[ri];
    const Node *p = res->n ? &res->node[pick(w, res->n)] : NULL;
    uint32_t k = p ? pick(w, p->nout) : 0;
    switch (pick(w, 5)) {
    case 0: verify_result(w, res); break; /* still intact, whatever happened since */
    case 1: if (p) EXPECT(w, p->marked[k] ? GS_OK : GS_ERR_NOT_AN_OUTPUT, gs_result_output(res->h, (gs_value){p->id, k}, &t)); break;
    case 2: if (p) EXPECT(w, GS_ERR_OUTPUT_INDEX, gs_result_output(res->h, (gs_value){p->id, p->nout + pick(w, 3)}, &t)); break;
    case 3: EXPECT(w, GS_ERR_UNKNOWN_VALUE, gs_result_output(res->h, (gs_value){res->n + pick(w, 3), 0}, &t)); break;
    case 4:
        EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_result_stats(res->h, NULL));
        if (first_marked(res, &v)) EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_result_output(res->h, v, NULL));
        break;
    }
}

/* ---- pools ---- */

static void act_pool_new(Walk *w) {
    int pi, v = (int)pick(w, 5);
    gs_pool *bad = NULL;
    gs_pool_config c = {.red_zones = v == 1, .large_threshold_bytes = v == 2 ? 256 : 0, .max_pool_bytes = v == 3 ? 4096 : 0};
    PICK(w, pi, MAXP, !w->p[i].h);
    if (pi < 0) return;
    if (v == 4) {
        c.large_threshold_bytes = 65537 + pick(w, 1000);
        EXPECT(w, GS_ERR_INVALID_ARGUMENT, gs_pool_new(&c, &bad));
        return;
    }
    memset(&w->p[pi], 0, sizeof w->p[pi]);
    EXPECT(w, GS_OK, gs_pool_new(v ? &c : NULL, &w->p[pi].h));
    w->p[pi].threshold = c.large_threshold_bytes ? c.large_threshold_bytes : 1024;
}

static void act_acquire(Walk *w) {
    int pi;
    PICK(w, pi, MAXP, w->p[i].h && w->p[i].nblk < MAXB);
    if (pi < 0) return;
    Pool *p = &w->p[pi];
    size_t n = 1 + pick(w, chance(w, 70) ? 512 : 8192);
    int zeroed = chance(w, 50);
    void *ptr = NULL;
    if (chance(w, 10)) {
        EXPECT(w, GS_ERR_INVALID_ARGUMENT, gs_pool_acquire(p->h, 0, &ptr));
        EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_pool_acquire_zeroed(p->h, n, NULL));
        return;
    }
    EXPECT(w, GS_OK, zeroed ? gs_pool_acquire_zeroed(p->h, n, &ptr) : gs_pool_acquire(p->h, n, &ptr));
    check(w, ptr && (uintptr_t)ptr % (n >= p->threshold ? 64 : 16) == 0, "a block is 16-byte aligned, 64 when large");
    for (size_t i = 0; zeroed && i < n; i++) check(w, ((uint8_t *)ptr)[i] == 0, "gs_pool_acquire_zeroed clears the block");
    p->blk[p->nblk] = ptr, p->bsz[p->nblk] = n, p->bseed[p->nblk] = rnd(w);
    fill(ptr, n, p->bseed[p->nblk++]);
    for (int s = 0; s < p->nstale; s++)
        if (p->stale[s] == ptr) p->stale[s] = p->stale[--p->nstale]; /* handed out again: live */
}

static void act_release(Walk *w) {
    static const char *const what[] = {"", "released already", "never from a pool", "interior",
                                       "another pool's block", "a result's output"};
    int pi, oi, b;
    gs_value v; gs_tensor t; void *ptr = NULL;
    PICK(w, pi, MAXP, w->p[i].h);
    if (pi < 0) return;
    Pool *p = &w->p[pi];
    uint64_t live = pool_live(w, p->h);
    uint32_t variant = pick(w, 7);
    switch (variant) {
    case 0: /* a held block */
        if (!p->nblk) return;
        b = (int)pick(w, (uint32_t)p->nblk), live -= p->bsz[b];
        release_block(w, p, b);
        check(w, pool_live(w, p->h) == live, "a release lowers live bytes by the bytes asked for");
        return;
    case 1: ptr = p->nstale ? p->stale[pick(w, (uint32_t)p->nstale)] : NULL; break;
    case 2: ptr = (void *)(outside + 16 * pick(w, 8)); break;
    case 3: ptr = p->nblk ? (char *)p->blk[pick(w, (uint32_t)p->nblk)] + 16 : NULL; break;
    case 4:
        PICK(w, oi, MAXP, w->p[i].h && i != pi && w->p[i].nblk);
        ptr = oi >= 0 ? w->p[oi].blk[pick(w, (uint32_t)w->p[oi].nblk)] : NULL;
        break;
    case 5:
        PICK(w, oi, MAXR, w->r[i].h && first_marked(&w->r[i], &v));
        if (oi >= 0 && first_marked(&w->r[oi], &v)) EXPECT(w, GS_OK, gs_result_output(w->r[oi].h, v, &t)), ptr = t.data;
        break;
    case 6: /* trim and reset peaks: held blocks keep their bytes */
        EXPECT(w, GS_OK, gs_pool_trim(p->h));
        EXPECT(w, GS_OK, gs_pool_reset_peaks(p->h));
        EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_pool_release(p->h, NULL));
        if (p->nblk) release_block(w, p, 0);
        return;
    }
    for (b = 0; b < p->nblk; b++)
        if (p->blk[b] == ptr) ptr = NULL; /* that would be a genuine release */
    if (!ptr) return;
    snprintf(w->what, sizeof w->what, "release of a pointer the pool does not hold (%s): %p", what[variant], ptr);
    EXPECT(w, GS_ERR_UNKNOWN_POINTER, gs_pool_release(p->h, ptr));
    check(w, pool_live(w, p->h) == live, "a refused release changes nothing");
}

/* ---- plans, executors, tokens, frees ---- */

static void act_plan_new(Walk *w) {
    int gi, pli;
    gs_plan *bad = NULL;
    uint32_t mode = pick(w, 4); /* GS_PLAN_SEQUENTIAL .. GS_PLAN_SCHEDULED */
    PICK(w, gi, MAXG, w->g[i].h);
    PICK(w, pli, MAXPL, !w->pl[i].h);
    if (gi < 0 || pli < 0) return;
    Graph *g = &w->g[gi];
    if (g->fin && !chance(w, 10)) make_plan(w, g, &w->pl[pli], mode);
    else EXPECT(w, g->fin ? GS_ERR_INVALID_ARGUMENT : GS_ERR_NOT_FINALIZED, gs_plan_new(g->h, g->fin ? 4 + mode : mode, &bad));
}

static void act_executor_new(Walk *w) {
    int ei;
    gs_executor_config c = {.threads = pick(w, 3)}; /* 0: one per core */
    PICK(w, ei, MAXE, !w->e[i]);
    if (ei < 0) return;
    EXPECT(w, GS_OK, gs_executor_new(c.threads || chance(w, 50) ? &c : NULL, &w->e[ei]));
    uint32_t n = gs_executor_threads(w->e[ei]);
    check(w, c.threads ? n == c.threads : n >= 1, "gs_executor_threads is the configured count");
}

static void act_token(Walk *w) {
    int ti = (int)pick(w, MAXT);
    if (!w->t[ti]) {
        EXPECT(w, GS_OK, gs_cancel_token_new(&w->t[ti]));
        w->cancelled[ti] = 0;
        return;
    }
    check(w, gs_cancel_token_cancel(w->t[ti]) == !w->cancelled[ti], "gs_cancel_token_cancel: 1, then 0");
    w->cancelled[ti] = 1;
}

/* Frees a live handle of a random kind. Its graph's results and plans stay valid, and a pool's
 * results (not the blocks acquired from it). */
static void act_free(Walk *w) {
    int s, kind = (int)pick(w, NKINDS);
    void *h = NULL;
    switch (kind) {
    case K_GRAPH: PICK(w, s, MAXG, w->g[i].h); if (s >= 0) h = w->g[s].h, gs_graph_free(w->g[s].h), w->g[s].h = NULL; break;
    case K_POOL: PICK(w, s, MAXP, w->p[i].h); if (s >= 0) h = w->p[s].h, gs_pool_free(w->p[s].h), memset(&w->p[s], 0, sizeof w->p[s]); break;
    case K_PLAN: PICK(w, s, MAXPL, w->pl[i].h); if (s >= 0) h = w->pl[s].h, gs_plan_free(w->pl[s].h), w->pl[s].h = NULL; break;
    case K_EXEC: PICK(w, s, MAXE, w->e[i]); if (s >= 0) h = w->e[s], gs_executor_free(w->e[s]), w->e[s] = NULL; break;
    case K_RESULT: PICK(w, s, MAXR, w->r[i].h); if (s >= 0) free_result(w, &w->r[s]); break;
    case K_TOKEN: PICK(w, s, MAXT, w->t[i]); if (s >= 0) h = w->t[s], gs_cancel_token_free(w->t[s]), w->t[s] = NULL; break;
    }
    if (h) remember(w, kind, h);
}

/* ---- misuse: freed handles, handles of another kind, NULL arguments ---- */

static void act_freed_handles(Walk *w) {
    int kind = (int)pick(w, NKINDS), gi, pi, pli, ri;
    void *h = pick_freed(w, kind);
    gs_run_stats s; uint32_t id;
    if (h && chance(w, 75)) { /* a freed handle: refused; freeing it again does nothing */
        refuse(w, kind, h), free_as(kind, h), refuse(w, kind, h);
        return;
    }
    /* a live handle of another kind: refused, and the wrong free leaves it alive */
    PICK(w, gi, MAXG, w->g[i].h && kind != K_GRAPH);
    PICK(w, pi, MAXP, w->p[i].h && kind != K_POOL);
    PICK(w, pli, MAXPL, w->pl[i].h && kind != K_PLAN);
    PICK(w, ri, MAXR, w->r[i].h && kind != K_RESULT);
    if (gi >= 0)
        refuse(w, kind, w->g[gi].h), free_as(kind, w->g[gi].h),
            EXPECT(w, GS_ERR_UNKNOWN_VALUE, gs_graph_find_node(w->g[gi].h, "nobody", &id));
    else if (pi >= 0)
        refuse(w, kind, w->p[pi].h), free_as(kind, w->p[pi].h), pool_live(w, w->p[pi].h);
    else if (pli >= 0)
        refuse(w, kind, w->pl[pli].h), free_as(kind, w->pl[pli].h), EXPECT(w, GS_OK, gs_plan_bytes(w->pl[pli].h, NULL, NULL));
    else if (ri >= 0)
        refuse(w, kind, w->r[ri].h), free_as(kind, w->r[ri].h), EXPECT(w, GS_OK, gs_result_stats(w->r[ri].h, &s));
}

static void act_null_args(Walk *w) {
    int gi, pi;
    gs_sim_options so = {.threads = 1};
    gs_sim_result sim; gs_tensor t; uint64_t a; uint32_t id;
    PICK(w, gi, MAXG, w->g[i].h);
    PICK(w, pi, MAXP, w->p[i].h);
    EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_graph_new(NULL)), EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_pool_new(NULL, NULL));
    EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_executor_new(NULL, NULL)), EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_cancel_token_new(NULL));
    EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_result_output(NULL, (gs_value){0, 0}, &t));
    EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_plan_bytes(NULL, &a, &a)), EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_graph_finalize(NULL));
    EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_simulate(NULL, &so, &sim)), EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_pool_acquire(NULL, 16, &t.data));
    expect_message(w, gs_cancel_token_cancel(NULL) == -1, "gs_cancel_token_cancel(NULL)");
    if (pi >= 0) EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_pool_get_stats(w->p[pi].h, NULL));
    if (gi < 0) return;
    gs_graph *g = w->g[gi].h;
    EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_graph_get_info(g, NULL)), EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_simulate(g, NULL, &sim));
    EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_plan_new(g, GS_PLAN_SEQUENTIAL, NULL));
    EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_graph_find_node(g, NULL, &id));
    EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_graph_add_node(g, NULL, NULL));
    EXPECT(w, GS_ERR_NULL_ARGUMENT, gs_graph_add_input(g, NULL, 16, NULL));
}

/* ---- the walk ---- */

static const struct { const char *name; void (*fn)(Walk *); uint32_t weight; } actions[] = {
    {"graph_new", act_graph_new, 4},     {"add_input", act_add_input, 5},   {"add_node", act_add_node, 14},
    {"mark_output", act_mark_output, 3}, {"finalize", act_finalize, 6},     {"inspect", act_inspect, 3},
    {"bad_graph", act_bad_graph, 2},     {"run", act_run, 22},              {"read_result", act_read_result, 8},
    {"pool_new", act_pool_new, 2},       {"acquire", act_acquire, 6},       {"release", act_release, 6},
    {"plan_new", act_plan_new, 8},       {"executor_new", act_executor_new, 1}, {"token", act_token, 2},
    {"free", act_free, 9},               {"freed_handles", act_freed_handles, 4}, {"null_args", act_null_args, 1},
};
enum { NACTIONS = sizeof actions / sizeof actions[0] };

static void walk(Walk *w, uint64_t seed, Tally *tally) {
    uint32_t total = 0;
    memset(w, 0, sizeof *w);
    w->seed = seed, w->rng = seed, w->tally = tally;
    for (int a = 0; a < NACTIONS; a++) total += actions[a].weight;
    for (w->step = 0; w->step < STEPS; w->step++) {
        uint32_t x = pick(w, total);
        int a = 0;
        while (x >= actions[a].weight) x -= actions[a++].weight;
        snprintf(w->what, sizeof w->what, "%s", actions[a].name);
        actions[a].fn(w);
    }
    snprintf(w->what, sizeof w->what, "final cleanup");
    for (int i = 0; i < MAXR; i++) if (w->r[i].h) free_result(w, &w->r[i]);
    for (int i = 0; i < MAXPL; i++) gs_plan_free(w->pl[i].h);
    for (int i = 0; i < MAXG; i++) gs_graph_free(w->g[i].h);
    for (int i = 0; i < MAXE; i++) gs_executor_free(w->e[i]);
    for (int i = 0; i < MAXT; i++) gs_cancel_token_free(w->t[i]);
    for (int i = 0; i < MAXP; i++) {
        while (w->p[i].nblk) release_block(w, &w->p[i], 0);
        if (w->p[i].h) check(w, pool_live(w, w->p[i].h) == 0, "a pool nobody holds anything of has no live bytes");
        gs_pool_free(w->p[i].h);
    }
}

int main(int argc, char **argv) {
    long seeds = argc > 1 ? strtol(argv[1], NULL, 10) : DEFAULT_SEEDS;
    Walk *w = malloc(sizeof *w);
    Tally tally = {{0}, {0}};
    if (!w || seeds < 1) return 2;
    for (long s = 1; s <= seeds; s++) walk(w, (uint64_t)s, &tally);
    free(w);
    printf("api_walk: %ld seeds x %d steps, every status as the model expects\nstatuses checked:", seeds, STEPS);
    for (int s = 0; s < 32; s++)
        if (tally.status[s]) printf(" %s %ld", gs_status_name(s), tally.status[s]);
    printf("\nruns by fault:");
    for (int f = 0; f < NFAULTS; f++) printf(" %s %ld%s", faults[f].name, tally.fault[f], f + 1 < NFAULTS ? "," : "\n");
    return 0;
}
