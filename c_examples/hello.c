#include <graphsched.h>
#include <stdio.h>

static int32_t fill(gs_kernel_ctx *ctx, void *user) {
    *(int *)gs_ctx_output(ctx, 0)->data = *(const int *)user;
    return 0;
}
static int32_t twice(gs_kernel_ctx *ctx, void *user) {
    (void)user;
    *(int *)gs_ctx_output(ctx, 0)->data = 2 * *(const int *)gs_ctx_input(ctx, 0)->data;
    return 0;
}

int main(void) {
    gs_graph *g; gs_pool *pool; gs_run_result *r; gs_tensor t;
    int seed = 21; size_t size = sizeof(int); uint32_t a, b;
    gs_graph_new(&g);
    gs_node_desc d1 = {.name = "fill", .kernel = fill, .user_data = &seed, .num_outputs = 1, .output_sizes = &size};
    gs_graph_add_node(g, &d1, &a);
    gs_value in = {a, 0};
    gs_node_desc d2 = {.name = "twice", .kernel = twice, .inputs = &in, .num_inputs = 1, .num_outputs = 1, .output_sizes = &size};
    gs_graph_add_node(g, &d2, &b);
    gs_graph_mark_output(g, (gs_value){b, 0});
    if (gs_graph_finalize(g) != GS_OK || gs_pool_new(NULL, &pool) != GS_OK ||
        gs_run(g, pool, NULL, &r) != GS_OK) {
        fprintf(stderr, "graphsched: %s\n", gs_last_error_message());
        return 1;
    }
    gs_result_output(r, (gs_value){b, 0}, &t);
    int answer = *(const int *)t.data;
    printf("twice(fill(21)) = %d\n", answer);
    gs_result_free(r); gs_pool_free(pool); gs_graph_free(g);
    return answer == 42 ? 0 : 1;
}
