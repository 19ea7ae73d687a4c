/*
 * tools/burstbench_cuda.c - GPU speed benchmark of the cuda backend through the public API:
 * forward and forward+backward TFLOP/s of one rank (G = 1) over N x d x mask x dtype, tensors in
 * device memory (burst_context_alloc), median of --iters timed runs after one warm-up. Prints a
 * table and writes CSV; tools/burstbench_cuda.py runs it beside PyTorch SDPA on the same sizes.
 * A program, not a test. FLOPs by the field's convention: forward 4 B Hq d N^2 (halved when
 * causal), fwd+bwd 3.5x forward. Times include what a caller pays per call (the plan's scratch
 * allocation, the final cast of O); the first forward of a plan is not timed.
 *
 * Every size is checked: the output rows of 16 (batch, head, query) triples spread over the
 * tensor against attention computed in fp64 on the host from the same (rounded) inputs; the
 * column max_err is max |O - ref| / max |ref| over those rows (a size whose error exceeds the
 * dtype's bound, 2^-7 for bf16, 2^-10 for fp16, 1e-4 for fp32, is marked FAIL and the program
 * exits 1 at the end). --width W sets the heads to W / d for each d (a model of width W).
 * --save DIR writes each size's inputs and outputs (q, k, v, o, and where the backward ran dout,
 * dq, dk, dv: raw [B, N, H, d] in the dtype) to DIR/<dtype>_<N>_<d>_<full|causal>_<name>.bin,
 * so that tools/burstbench_cuda.py can measure a peer's error against fp64 on the same inputs.
 *
 *   burstbench_cuda [--seqs 4096,16384] [--dims 64,128] [--masks full,causal]
 *                   [--dtypes bf16,fp16] [--heads 32 | --width 2048] [--batch 1] [--iters 5]
 *                   [--bwd-max-seq 16384] [--impl burst] [--csv FILE] [--save DIR]
 *                   [--softcap C] [--fp8 1]
 * --softcap C soft-caps the scores (plan softcap, C * tanh(s / C)); the check applies it too.
 * --fp8 1 runs the forward alone on e4m3 products (plan fp8_forward; the dtype column says
 * e4m3 and the inputs are the dtype's); its check against the fp64 reference of the unquantized
 * inputs allows 2^-2, a check for gross faults only (e4m3 rounds each input by up to 2^-4;
 * tests/test_fp8.c checks the fp8 forward against a reference of the quantized inputs).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "burst/burst.h"
#include "bench_util.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --save: the host copies of one size's q, k, v, o (n = 4) and dout, dq, dk, dv (n = 8) as
 * DIR/<tag>_<name>.bin; 0 on success. */
static int save_inputs(const char *dir, const char *tag, void *const *host, int n, size_t bytes)
{
    static const char *const names[8] = {"q", "k", "v", "o", "do", "dq", "dk", "dv"};
    for (int t = 0; t < n; t++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s_%s.bin", dir, tag, names[t]);
        FILE *f = fopen(path, "wb");
        const int ok = f && fwrite(host[t], 1, bytes, f) == bytes;
        if (f && fclose(f) != 0)
            return -1;
        if (!ok) {
            perror(path);
            return -1;
        }
    }
    return 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Max |O - ref| / max |ref| over 16 rows (b, h, i) spread over [B, N, H, d] O, with ref the
 * fp64 attention of the host inputs (scale 1 / sqrt(d), scores soft-capped by cap > 0, key j
 * allowed when !causal or j <= i). */
static double check_rows(burst_dtype_t dt, const void *q, const void *k, const void *v,
                         const void *o, long B, long N, long H, long d, int causal, double cap)
{
    double err = 0, mag = 0, *p = malloc((size_t)N * sizeof *p);
    if (!p)
        return NAN;
    for (int r = 0; r < 16; r++) {
        const long b = r % B, h = (r * 7) % H,
                   i = r == 15 ? N - 1 : (long)(((r * 2654435761u) >> 3) % (unsigned long)N);
        const size_t qrow = (size_t)(((b * N + i) * H + h) * d);
        const long je = causal ? i + 1 : N;
        double mx = -INFINITY, sum = 0;
        for (long j = 0; j < je; j++) {
            const size_t krow = (size_t)(((b * N + j) * H + h) * d);
            double x = 0;
            for (long c = 0; c < d; c++)
                x += bench_host_val(dt, q, qrow + c) * bench_host_val(dt, k, krow + c);
            p[j] = x / sqrt((double)d);
            if (cap > 0)
                p[j] = cap * tanh(p[j] / cap);
            mx = p[j] > mx ? p[j] : mx;
        }
        for (long j = 0; j < je; j++)
            sum += p[j] = exp(p[j] - mx);
        for (long c = 0; c < d; c++) {
            double ref = 0;
            for (long j = 0; j < je; j++)
                ref += p[j] * bench_host_val(dt, v, (size_t)(((b * N + j) * H + h) * d + c));
            ref /= sum;
            const double e = fabs(bench_host_val(dt, o, qrow + c) - ref);
            err = e > err ? e : err;
            mag = fabs(ref) > mag ? fabs(ref) : mag;
        }
    }
    free(p);
    return err / (mag > 0 ? mag : 1);
}

/* Device tensor [B, N, H, d] of dtype dt filled with uniform(-1, 1) values; the host copy goes
 * to *host_p when that is not NULL (the caller frees it). */
static void *dev_tensor(struct burst_context *ctx, burst_dtype_t dt, size_t count, uint64_t *st,
                        void **host_p)
{
    size_t es = burst_dtype_size(dt), bytes = count * es;
    void *h = malloc(bytes), *d = NULL;
    if (!h)
        return NULL;
    for (size_t i = 0; i < count; i++) {
        *st = *st * 6364136223846793005ull + 1442695040888963407ull;
        float x = (float)((double)(*st >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
        uint32_t b;
        memcpy(&b, &x, 4);
        uint16_t v;
        if (dt == BURST_DTYPE_BF16) {
            v = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
        } else { /* fp16 of a value in (-1, 1): exponent >= -24 handled coarsely (bench data) */
            float a = fabsf(x);
            int e;
            float m = frexpf(a, &e);
            v = a < 6.1e-5f ? 0
                            : (uint16_t)(((unsigned)(e - 1 + 15) << 10) |
                                         ((unsigned)lrintf((m * 2.0f - 1.0f) * 1024.0f) & 1023u));
            v |= x < 0 ? 0x8000u : 0u;
        }
        if (dt == BURST_DTYPE_FP32)
            memcpy((char *)h + 4 * i, &x, 4);
        else
            memcpy((char *)h + 2 * i, &v, 2);
    }
    if (burst_context_alloc(ctx, bytes, &d) != BURST_OK ||
        burst_context_memcpy(ctx, d, h, bytes) != BURST_OK) {
        burst_context_free(ctx, d);
        d = NULL;
    }
    if (host_p && d)
        *host_p = h;
    else
        free(h);
    return d;
}

struct bench_opts {
    long seqs[BENCH_MAX_LIST], dims[BENCH_MAX_LIST];
    int nseq, ndim, nmask, ndt, iters;
    int masks[2];
    burst_dtype_t dts[3];
    long heads, batch, bwd_max, width;
    const char *csv, *impl, *save;
    double softcap;
    int fp8;
};

/* The command line into *o (the defaults where a flag is absent): 0, or 2 after a message. */
static int parse_args(int argc, char **argv, struct bench_opts *o)
{
    long *seqs = o->seqs, *dims = o->dims;
    int *masks = o->masks;
    burst_dtype_t *dts = o->dts;
    seqs[0] = 4096, seqs[1] = 16384, dims[0] = 64, dims[1] = 128;
    int nseq = 2, ndim = 2, nmask = 2, ndt = 2, iters = 5;
    masks[0] = 0, masks[1] = 1;
    dts[0] = BURST_DTYPE_BF16, dts[1] = BURST_DTYPE_FP16;
    long heads = 32, batch = 1, bwd_max = 16384, width = 0;
    const char *csv = "burstbench_cuda.csv", *impl = "burst", *save = NULL;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "--seqs") && v)
            nseq = bench_parse_list(v, seqs);
        else if (!strcmp(a, "--dims") && v)
            ndim = bench_parse_list(v, dims);
        else if (!strcmp(a, "--heads") && v)
            heads = atol(v);
        else if (!strcmp(a, "--width") && v)
            width = atol(v);
        else if (!strcmp(a, "--impl") && v)
            impl = v;
        else if (!strcmp(a, "--batch") && v)
            batch = atol(v);
        else if (!strcmp(a, "--iters") && v)
            iters = atoi(v);
        else if (!strcmp(a, "--bwd-max-seq") && v)
            bwd_max = atol(v);
        else if (!strcmp(a, "--csv") && v)
            csv = v;
        else if (!strcmp(a, "--save") && v)
            save = v;
        else if (!strcmp(a, "--fp8") && v)
            o->fp8 = atoi(v) != 0;
        else if (!strcmp(a, "--softcap") && v) {
            char *end;
            o->softcap = strtod(v, &end);
            if (*end || !(o->softcap >= 0.0 && o->softcap < 1e30)) {
                fprintf(stderr, "burstbench_cuda: --softcap: '%s' is not a cap >= 0\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--masks") && v) {
            nmask = 0;
            if (strstr(v, "full"))
                masks[nmask++] = 0;
            if (strstr(v, "causal"))
                masks[nmask++] = 1;
        } else if (!strcmp(a, "--dtypes") && v) {
            ndt = 0;
            if (strstr(v, "bf16"))
                dts[ndt++] = BURST_DTYPE_BF16;
            if (strstr(v, "fp16"))
                dts[ndt++] = BURST_DTYPE_FP16;
            if (strstr(v, "fp32"))
                dts[ndt++] = BURST_DTYPE_FP32;
        } else {
            used = 0;
        }
        if (!used || nseq < 1 || ndim < 1 || iters < 1) {
            fprintf(stderr,
                    "burstbench_cuda: bad argument %s (see the comment at the top of "
                    "tools/burstbench_cuda.c)\n",
                    a);
            return 2;
        }
    }
    o->nseq = nseq, o->ndim = ndim, o->nmask = nmask, o->ndt = ndt, o->iters = iters;
    o->heads = heads, o->batch = batch, o->bwd_max = bwd_max, o->width = width;
    o->csv = csv, o->impl = impl, o->save = save;
    return 0;
}

/* One size: time it, check it, print its row and its CSV line. 1 if it failed the check, 0
 * otherwise (a size that could not run is reported and skipped). */
static int bench_one(struct burst_context *ctx, const struct bench_opts *opt, FILE *f,
                     burst_dtype_t dt, long N, long d, long heads, int causal, uint64_t *stp)
{
    const long batch = opt->batch, bwd_max = opt->bwd_max;
    const int iters = opt->iters;
    const char *impl = opt->impl, *save = opt->save;
    uint64_t st = *stp;
    int failed = 0;
    struct burst_local_world *world = NULL;
    struct burst_comm *comm = NULL;
    struct burst_plan *plan = NULL;
    struct burst_comm_params cm = burst_comm_params_default();
    struct burst_plan_params pp = burst_plan_params_default();
    pp.batch = batch;
    pp.seq_len = N;
    pp.q_heads = (int)heads;
    pp.kv_heads = (int)heads;
    pp.head_dim = (int)d;
    pp.dtype = dt;
    pp.causal = causal;
    pp.softcap = (float)opt->softcap;
    pp.fp8_forward = opt->fp8;
    /* the kernels' speed: one ring per call, never head groups (their memory
     * and time trade-off is tools/burstbench_ring.py's --workspace) */
    pp.workspace_limit = UINT64_MAX;
    cm.rank = 0;
    cm.size = 1;
    size_t cnt = (size_t)(batch * N * heads * d);
    void *q = NULL, *k = NULL, *v = NULL, *o = NULL, *dout = NULL, *dq = NULL, *dk = NULL,
         *dv = NULL, *lse = NULL, *hq = NULL, *hk = NULL, *hv = NULL, *ho = NULL,
         *hg[4] = {NULL, NULL, NULL, NULL};
    if (burst_local_world_create(1, &world) != BURST_OK ||
        (cm.world = world, burst_comm_create(&cm, &comm)) != BURST_OK ||
        burst_plan_create(ctx, comm, &pp, &plan) != BURST_OK ||
        !(q = dev_tensor(ctx, dt, cnt, &st, &hq)) || !(k = dev_tensor(ctx, dt, cnt, &st, &hk)) ||
        !(v = dev_tensor(ctx, dt, cnt, &st, &hv)) ||
        !(dout = dev_tensor(ctx, dt, cnt, &st, save ? &hg[0] : NULL)) ||
        !(o = dev_tensor(ctx, dt, cnt, &st, &ho)) || !(dq = dev_tensor(ctx, dt, cnt, &st, NULL)) ||
        !(dk = dev_tensor(ctx, dt, cnt, &st, NULL)) ||
        !(dv = dev_tensor(ctx, dt, cnt, &st, NULL)) ||
        burst_context_alloc(ctx, (size_t)(batch * heads * N) * 4, &lse) != BURST_OK) {
        fprintf(stderr, "burstbench_cuda: N=%ld d=%ld: %s\n", N, d, burst_last_error());
        goto next;
    }
    {
        struct burst_tensor tq = burst_tensor_contiguous(q, dt, batch, N, heads, d),
                            tk = burst_tensor_contiguous(k, dt, batch, N, heads, d),
                            tv = burst_tensor_contiguous(v, dt, batch, N, heads, d),
                            to = burst_tensor_contiguous(o, dt, batch, N, heads, d),
                            tdo = burst_tensor_contiguous(dout, dt, batch, N, heads, d),
                            tdq = burst_tensor_contiguous(dq, dt, batch, N, heads, d),
                            tdk = burst_tensor_contiguous(dk, dt, batch, N, heads, d),
                            tdv = burst_tensor_contiguous(dv, dt, batch, N, heads, d);
        double tf[64], tb[64],
            fl = 4.0 * (double)batch * (double)heads * (double)d * (double)N * (double)N *
                 (causal ? 0.5 : 1.0);
        int it = iters > 64 ? 64 : iters, do_bwd = N <= bwd_max && !opt->fp8;
        burst_status_t s2 = burst_attention_forward(plan, &tq, &tk, &tv, &to, lse);
        for (int r = 0; s2 == BURST_OK && r < it; r++) {
            double t0 = now_s();
            s2 = burst_attention_forward(plan, &tq, &tk, &tv, &to, lse);
            double t1 = now_s();
            if (s2 == BURST_OK && do_bwd)
                s2 =
                    burst_attention_backward(plan, &tq, &tk, &tv, &to, lse, &tdo, &tdq, &tdk, &tdv);
            tf[r] = t1 - t0;
            tb[r] = now_s() - t0;
        }
        if (s2 != BURST_OK) {
            fprintf(stderr, "burstbench_cuda: N=%ld d=%ld: %s\n", N, d, burst_last_error());
            goto next;
        }
        double mf = median(tf, it), mb = do_bwd ? median(tb, it) : NAN;
        /* the last forward's O against the fp64 reference */
        double err = NAN;
        if (burst_context_memcpy(ctx, ho, o, cnt * burst_dtype_size(dt)) == BURST_OK)
            err = check_rows(dt, hq, hk, hv, ho, batch, N, heads, d, causal, opt->softcap);
        const double bound = opt->fp8                 ? 0x1p-2
                             : dt == BURST_DTYPE_BF16 ? 0x1p-7
                             : dt == BURST_DTYPE_FP16 ? 0x1p-10
                                                      : 1e-4;
        const char *dname = opt->fp8 ? "e4m3" : burst_dtype_name(dt);
        int bad = !(err <= bound);
        if (save) {
            char tag[64];
            const size_t by = cnt * burst_dtype_size(dt);
            void *host[8] = {hq, hk, hv, ho, hg[0]}, *gd[3] = {dq, dk, dv};
            for (int g = 0; do_bwd && g < 3; g++)
                if ((host[5 + g] = hg[1 + g] = malloc(by)) == NULL ||
                    burst_context_memcpy(ctx, host[5 + g], gd[g], by) != BURST_OK)
                    bad = 1;
            snprintf(tag, sizeof tag, "%s_%ld_%ld_%s", burst_dtype_name(dt), N, d,
                     causal ? "causal" : "full");
            bad |= save_inputs(save, tag, host, do_bwd ? 8 : 4, by) != 0;
        }
        failed += bad;
        printf("%-6s %6ld %4ld %5ld %6s %10.3f %10.1f %12.3f %12.1f %9.2e%s\n", dname, N, d, heads,
               causal ? "yes" : "no", mf * 1e3, fl / mf * 1e-12, mb * 1e3, 3.5 * fl / mb * 1e-12,
               err, bad ? " FAIL" : "");
        fprintf(f, "%s,%s,%ld,%ld,%ld,%ld,%d,%.4f,%.2f,%.4f,%.2f,%.3e\n", impl, dname, batch, heads,
                N, d, causal, mf * 1e3, fl / mf * 1e-12, mb * 1e3, 3.5 * fl / mb * 1e-12, err);
        fflush(stdout);
        fflush(f);
    }
next:
    burst_plan_destroy(plan);
    burst_comm_destroy(comm);
    burst_local_world_destroy(world);
    void *bufs[] = {q, k, v, o, dout, dq, dk, dv, lse};
    for (size_t b = 0; b < sizeof bufs / sizeof *bufs; b++)
        burst_context_free(ctx, bufs[b]);
    free(hq), free(hk), free(hv), free(ho);
    for (int g = 0; g < 4; g++)
        free(hg[g]);
    *stp = st;
    return failed;
}

int main(int argc, char **argv)
{
    struct bench_opts o = {.softcap = 0.0};
    if (parse_args(argc, argv, &o) != 0)
        return 2;
    long heads = o.heads;
    const char *csv = o.csv;
    int failed = 0;
    struct burst_context_params cp = burst_context_params_default();
    cp.backend = "cuda";
    struct burst_context *ctx = NULL;
    if (burst_context_create(&cp, &ctx) != BURST_OK) {
        fprintf(stderr, "burstbench_cuda: %s\n", burst_last_error());
        return 77;
    }
    FILE *f = fopen(csv, "w");
    if (!f) {
        perror(csv);
        return 1;
    }
    fprintf(f, "impl,dtype,batch,heads,seq,head_dim,causal,fwd_ms,fwd_tflops,fwdbwd_ms,"
               "fwdbwd_tflops,max_err\n");
    printf("%-6s %6s %4s %5s %6s %10s %10s %12s %12s %9s\n", "dtype", "N", "d", "heads", "causal",
           "fwd ms", "fwd TF/s", "fwd+bwd ms", "fwd+bwd TF/s", "max err");
    uint64_t st = 42;
    for (int di = 0; di < o.ndt; di++)
        for (int ni = 0; ni < o.nseq; ni++)
            for (int hi = 0; hi < o.ndim; hi++)
                for (int mi = 0; mi < o.nmask; mi++) {
                    const long N = o.seqs[ni], d = o.dims[hi];
                    if (o.width > 0)
                        heads = o.width / d > 0 ? o.width / d : 1;
                    failed += bench_one(ctx, &o, f, o.dts[di], N, d, heads, o.masks[mi], &st);
                }
    fclose(f);
    burst_context_destroy(ctx);
    if (failed)
        fprintf(stderr, "burstbench_cuda: %d size(s) failed the check\n", failed);
    return failed ? 1 : 0;
}
