/*
 * examples/embed.c - burst used the way an application uses it.
 *
 * Two ranks run as threads of this process over an in-process ring (burst_local_world). The
 * application holds global Q, K, V, dO in natural token order, permutes them into the causal
 * zigzag layout with burst_layout_permute, hands each rank a strided view of its shard, runs
 * the forward and the backward, and permutes the output back. The tensors the ranks compute on
 * live in the context's memory (burst_context_alloc, filled and read with burst_context_memcpy):
 * the portable way, required where the backend computes on device memory (cuda; see
 * burst_context_device_memory) and free of staging copies everywhere else.
 *
 * The library's own messages (burst/log.h: warnings, and with BURST_LOG=info what it chose) go
 * to the application's log function, app_log, with their level, subsystem and rank.
 *
 * Check: with a causal mask the first token attends only to itself, so O at position 0 equals V
 * at position 0 in every head; every output and gradient must be finite.
 *
 * Build against an installed burst (README.md, "Using the library"):
 *   cc -std=c11 embed.c $(pkg-config --cflags --libs burst) -pthread -o embed
 * or with CMake: find_package(burst 0.6 REQUIRED) and target_link_libraries(embed PRIVATE
 * burst::burst Threads::Threads m).
 */
#include <burst/burst.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define RANKS 2
#define SEQ 256
#define HEADS 2
#define DIM 64
#define DTYPE BURST_DTYPE_BF16
#define LAYOUT BURST_LAYOUT_ZIGZAG

/* Global tensors, [1, SEQ, HEADS, DIM] bf16, in permuted order (rank 0's shard, then rank 1's),
 * in the context's memory. */
struct app {
    struct burst_context *ctx;
    struct burst_local_world *world;
    uint16_t *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    burst_status_t status[RANKS];
};

struct rank_arg {
    struct app *app;
    int rank;
};

/* This rank's rows of a permuted global tensor, described with the global strides. */
static struct burst_tensor shard(uint16_t *base, int64_t offset, int64_t len)
{
    struct burst_tensor t =
        burst_tensor_contiguous(base + offset * HEADS * DIM, DTYPE, 1, len, HEADS, DIM);
    t.stride[0] = (int64_t)SEQ * HEADS * DIM;
    return t;
}

static void *rank_main(void *arg)
{
    struct rank_arg *ra = arg;
    struct app *app = ra->app;
    struct burst_comm *comm = NULL;
    struct burst_plan *plan = NULL;
    float *lse = NULL;
    burst_status_t st;

    struct burst_comm_params cp = burst_comm_params_default();
    cp.rank = ra->rank;
    cp.size = RANKS;
    cp.world = app->world;
    st = burst_comm_create(&cp, &comm);
    if (st != BURST_OK)
        goto out;

    struct burst_plan_params pp = burst_plan_params_default();
    pp.seq_len = SEQ;
    pp.q_heads = HEADS;
    pp.kv_heads = HEADS;
    pp.head_dim = DIM;
    pp.dtype = DTYPE;
    pp.causal = 1;
    pp.layout = LAYOUT;
    st = burst_plan_create(app->ctx, comm, &pp, &plan); /* collective */
    if (st != BURST_OK)
        goto out;

    int64_t off, len = burst_plan_local_len(plan);
    st = burst_layout_shard_offset(LAYOUT, SEQ, RANKS, ra->rank, &off);
    if (st != BURST_OK)
        goto out;
    st = burst_context_alloc(app->ctx, (size_t)(HEADS * len) * sizeof(*lse), (void **)&lse);
    if (st != BURST_OK)
        goto out;
    struct burst_tensor q = shard(app->q, off, len), k = shard(app->k, off, len),
                        v = shard(app->v, off, len), o = shard(app->o, off, len),
                        dout = shard(app->dout, off, len), dq = shard(app->dq, off, len),
                        dk = shard(app->dk, off, len), dv = shard(app->dv, off, len);
    st = burst_attention_forward(plan, &q, &k, &v, &o, lse);
    if (st == BURST_OK)
        st = burst_attention_backward(plan, &q, &k, &v, &o, lse, &dout, &dq, &dk, &dv);
out:
    if (st != BURST_OK)
        fprintf(stderr, "embed: rank %d: %s: %s\n", ra->rank, burst_status_str(st),
                burst_last_error());
    app->status[ra->rank] = st;
    burst_context_free(app->ctx, lse);
    burst_plan_destroy(plan);
    burst_comm_destroy(comm);
    return NULL;
}

/* Natural-order random bf16 tensor, permuted on the host (host_per), copied into dst. */
static int fill(struct burst_context *ctx, uint16_t *dst, uint16_t *tmp, uint16_t *host_per,
                uint32_t seed)
{
    for (size_t i = 0; i < (size_t)SEQ * HEADS * DIM; i++) {
        seed = seed * 1664525u + 1013904223u;
        tmp[i] = burst_fp32_to_bf16((float)(seed >> 8) / 8388608.0f - 1.0f);
    }
    struct burst_tensor nat = burst_tensor_contiguous(tmp, DTYPE, 1, SEQ, HEADS, DIM);
    struct burst_tensor per = burst_tensor_contiguous(host_per, DTYPE, 1, SEQ, HEADS, DIM);
    if (burst_layout_permute(LAYOUT, RANKS, &nat, &per) != BURST_OK)
        return -1;
    return burst_context_memcpy(ctx, dst, host_per, (size_t)SEQ * HEADS * DIM * 2) == BURST_OK ? 0
                                                                                               : -1;
}

static double max_abs(const uint16_t *x)
{
    double m = 0.0;
    for (size_t i = 0; i < (size_t)SEQ * HEADS * DIM; i++) {
        double a = fabs((double)burst_bf16_to_fp32(x[i]));
        m = (a > m || isnan(a)) ? a : m; /* NaN sticks */
    }
    return m;
}

/* The library's messages into the application's log (here: stderr with its prefix). Called one
 * message at a time, from whichever thread the library speaks on; it must not call burst. */
static void app_log(void *user, burst_log_level_t level, const char *subsystem, int rank,
                    const char *message)
{
    const char *app_name = user;
    if (rank >= 0)
        fprintf(stderr, "%s: burst %s %s rank %d: %s\n", app_name, burst_log_level_str(level),
                subsystem, rank, message);
    else
        fprintf(stderr, "%s: burst %s %s: %s\n", app_name, burst_log_level_str(level), subsystem,
                message);
}

int main(void)
{
    struct app app = {0};
    size_t bytes = (size_t)SEQ * HEADS * DIM * sizeof(uint16_t);
    uint16_t **bufs[] = {&app.q, &app.k, &app.v, &app.o, &app.dout, &app.dq, &app.dk, &app.dv};
    /* host copies: scratch, the permuted inputs and outputs, o and v back in natural order */
    uint16_t *tmp = malloc(bytes), *o_nat = malloc(bytes), *v_nat = malloc(bytes);
    uint16_t *h[8] = {0};
    int ok = tmp && o_nat && v_nat;
    for (int i = 0; i < 8; i++)
        ok &= (h[i] = malloc(bytes)) != NULL;
    if (!ok) {
        fprintf(stderr, "embed: out of memory\n");
        return 1;
    }

    printf("embed: burst %s (built against %s)\n", burst_version_string(), BURST_VERSION_STRING);
    burst_set_log_callback(app_log, "embed"); /* thresholds: BURST_LOG, else warn */
    if (burst_context_create(NULL, &app.ctx) != BURST_OK ||
        burst_local_world_create(RANKS, &app.world) != BURST_OK) {
        fprintf(stderr, "embed: %s\n", burst_last_error());
        return 1;
    }
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (burst_context_alloc(app.ctx, bytes, (void **)bufs[i]) != BURST_OK) {
            fprintf(stderr, "embed: burst_context_alloc: %s\n", burst_last_error());
            return 1;
        }
    if (fill(app.ctx, app.q, tmp, h[0], 1) || fill(app.ctx, app.k, tmp, h[1], 2) ||
        fill(app.ctx, app.v, tmp, h[2], 3) || fill(app.ctx, app.dout, tmp, h[4], 4)) {
        fprintf(stderr, "embed: filling the inputs: %s\n", burst_last_error());
        return 1;
    }

    pthread_t th[RANKS];
    struct rank_arg args[RANKS];
    for (int r = 0; r < RANKS; r++) {
        args[r] = (struct rank_arg){&app, r};
        if (pthread_create(&th[r], NULL, rank_main, &args[r]) != 0) {
            fprintf(stderr, "embed: pthread_create failed\n");
            return 1;
        }
    }
    for (int r = 0; r < RANKS; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < RANKS; r++)
        if (app.status[r] != BURST_OK)
            return 1;

    /* the outputs to the host (h[3] = o, h[5..7] = dq, dk, dv), back to natural order, then
     * compare O[0] with V[0] */
    for (int i = 3; i < 8; i++)
        if (i != 4 && burst_context_memcpy(app.ctx, h[i], *bufs[i], bytes) != BURST_OK) {
            fprintf(stderr, "embed: burst_context_memcpy: %s\n", burst_last_error());
            return 1;
        }
    struct burst_tensor per_o = burst_tensor_contiguous(h[3], DTYPE, 1, SEQ, HEADS, DIM);
    struct burst_tensor per_v = burst_tensor_contiguous(h[2], DTYPE, 1, SEQ, HEADS, DIM);
    struct burst_tensor nat_o = burst_tensor_contiguous(o_nat, DTYPE, 1, SEQ, HEADS, DIM);
    struct burst_tensor nat_v = burst_tensor_contiguous(v_nat, DTYPE, 1, SEQ, HEADS, DIM);
    if (burst_layout_unpermute(LAYOUT, RANKS, &per_o, &nat_o) != BURST_OK ||
        burst_layout_unpermute(LAYOUT, RANKS, &per_v, &nat_v) != BURST_OK) {
        fprintf(stderr, "embed: burst_layout_unpermute: %s\n", burst_last_error());
        return 1;
    }
    double err0 = 0.0;
    for (int i = 0; i < HEADS * DIM; i++) {
        double e = fabs((double)burst_bf16_to_fp32(o_nat[i]) - burst_bf16_to_fp32(v_nat[i]));
        err0 = e > err0 ? e : err0;
    }
    double mo = max_abs(h[3]), mq = max_abs(h[5]), mk = max_abs(h[6]), mv = max_abs(h[7]);
    int pass = err0 <= 1e-2 && isfinite(mo) && isfinite(mq) && isfinite(mk) && isfinite(mv) &&
               mq > 0 && mk > 0 && mv > 0;
    printf("embed: %d ranks, N=%d, H=%d, d=%d, causal zigzag bf16 on %s: max |O[0]-V[0]| = %.3g, "
           "max |dQ| = %.3g, |dK| = %.3g, |dV| = %.3g: %s\n",
           RANKS, SEQ, HEADS, DIM, burst_context_backend(app.ctx), err0, mq, mk, mv,
           pass ? "ok" : "FAILED");

    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        burst_context_free(app.ctx, *bufs[i]);
    burst_local_world_destroy(app.world);
    burst_context_destroy(app.ctx);
    for (int i = 0; i < 8; i++)
        free(h[i]);
    free(tmp);
    free(o_nat);
    free(v_nat);
    return pass ? 0 : 1;
}
