/* The kernels of ops_common.h, compiled once for both benchmark programs. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include "ops_common.h"

/* Weights: one matrix per size, the same in every program. */
static float ops_w_heavy[OPS_HEAVY * OPS_HEAVY], ops_w_light[OPS_LIGHT * OPS_LIGHT];

void ops_init_weights(void) {
    for (int i = 0; i < OPS_HEAVY * OPS_HEAVY; i++) ops_w_heavy[i] = (float)((i * 7) % 13) / 13.0f - 0.45f;
    for (int i = 0; i < OPS_LIGHT * OPS_LIGHT; i++) ops_w_light[i] = (float)((i * 5) % 11) / 11.0f - 0.45f;
}

/* Rows [begin, end) of out = in x W for n x n matrices; in is read from rows of at least n. */
void ops_matmul_rows(const float *in, float *out, int n, size_t begin, size_t end) {
    /* Blocks of 16 columns accumulated in registers, stored once: no store in the inner loop,
     * so its speed does not depend on where the buffers happen to lie (4 KiB aliasing between
     * an output row and the row of W being read costs 2x otherwise). */
    const float *w = n == OPS_HEAVY ? ops_w_heavy : ops_w_light;
    for (size_t i = begin; i < end; i++) {
        const float *a = in + i * (size_t)n;
        for (int jb = 0; jb < n; jb += 16) {
            float s[16] = {0};
            for (int k = 0; k < n; k++) {
                const float *wr = w + (size_t)k * (size_t)n + jb;
                for (int j = 0; j < 16; j++) s[j] += a[k] * wr[j];
            }
            memcpy(out + i * (size_t)n + jb, s, sizeof s);
        }
    }
}

/* The source's output: the largest matrix, which every first node reads a prefix of. */
void ops_fill(float *out) {
    for (int i = 0; i < OPS_HEAVY * OPS_HEAVY; i++) out[i] = (float)(i % 17) / 17.0f - 0.5f;
}

