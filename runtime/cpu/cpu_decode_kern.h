/*
 * runtime/cpu/cpu_decode_kern.h - the decode work item (TEMPLATE, compiled once per variant in an
 * object of its own, cpu_items.h; cpu_decode.c runs it).
 *
 * One item = (kv head g, run of keys). Its R = t x group query rows (row r = i * group + hh for
 * query i of head g * group + hh, so the rows that see a key form a suffix) are loaded once,
 * transposed and pre-scaled by tau * log2(e) (Qt[c][r], R padded to whole vectors with zero
 * columns); K/V tiles of BURST_CPU_DECODE_BT keys of head g are gathered from the paged pools
 * into fp32 rows and stream through as in the forward:
 *   St = K Qt              [BT x Rp], scores in log2 units, key-major
 *   soft-capping           St = c tanh(St / c) when the call has a cap
 *   mask partial tiles     St = -inf for keys past each row's last allowed key
 *   m' = max(m, colmax St), alpha = 2^(m - m'), P = 2^(St - m'), l = alpha l + colsum P
 *   O  = alpha O + P^T V   [R x d]
 * (with m' = -inf treated as 0 so rows without a key stay exactly 0). The item's partial
 * (O unnormalised, m in natural units, l) goes to its slot of the job's partials. The next
 * tile's K and V rows are prefetched while a tile computes.
 */
#include "cpu_simd.h"
#include "cpu_tile.h"

#undef decode_item
#undef decode_load_kv
#undef decode_softmax
#undef decode_prefetch
#define decode_prefetch KFN(decode_prefetch)
#define decode_item KFN(burst_cpu_decode_item)
#define decode_load_kv KFN(decode_load_kv)
#define decode_softmax KFN(decode_softmax)

/* Keys [j0, j0 + cnt) of kv head g as fp32 rows of k and v, zero padded to jn rows. */
KATTR void decode_load_kv(const struct burst_cpu_decode_job *j, struct burst_cpu_decode_scratch *sc,
                          int64_t g, int64_t j0, int64_t cnt, int64_t jn)
{
    const struct burst_decode_args *a = j->a;
    const int64_t d = j->d, bl = a->block_len;
    const burst_dtype_t dt = a->q->dtype;
    const char *kp = a->k_pool, *vp = a->v_pool;
    for (int64_t x = 0; x < cnt; x++) {
        const int64_t key = j0 + x;
        const size_t row = (size_t)a->blocks_host[key / bl] * (size_t)bl + (size_t)(key % bl);
        const size_t off = ((row * (size_t)a->hkv + (size_t)g) * (size_t)d) * j->esz;
        load_row(sc->k + x * d, kp + off, dt, d, 1.0f);
        load_row(sc->v + x * d, vp + off, dt, d, 1.0f);
    }
    if (jn > cnt) {
        memset(sc->k + cnt * d, 0, sizeof(float) * (size_t)((jn - cnt) * d));
        memset(sc->v + cnt * d, 0, sizeof(float) * (size_t)((jn - cnt) * d));
    }
}

/* Ask the cpu to start loading the K and V rows of keys [j0, j0 + cnt) of kv head g. */
KATTR void decode_prefetch(const struct burst_cpu_decode_job *j, int64_t g, int64_t j0, int64_t cnt)
{
    const struct burst_decode_args *a = j->a;
    const int64_t bl = a->block_len;
    for (int64_t key = j0; key < j0 + cnt; key++) {
        const size_t row = (size_t)a->blocks_host[key / bl] * (size_t)bl + (size_t)(key % bl);
        const size_t off = ((row * (size_t)a->hkv + (size_t)g) * (size_t)j->d) * j->esz;
        burst_cpu_prefetch((const char *)a->k_pool + off, j->esz, 0, 0, 1, j->d, 0);
        burst_cpu_prefetch((const char *)a->v_pool + off, j->esz, 0, 0, 1, j->d, 0);
    }
}

/* The online softmax of the tile's scores St [jn x Rp] (P in place of St): m, alpha, l per row. */
KATTR void decode_softmax(struct burst_cpu_decode_scratch *sc, int64_t jn, int64_t Rp)
{
    for (int64_t i = 0; i < Rp; i += VL) {
        vf mx = vf_set1(-(float)INFINITY);
        for (int64_t x = 0; x < jn; x++)
            mx = vf_max(mx, vf_load(sc->s + x * Rp + i));
        vf mold = vf_load(sc->m + i);
        vf mnew = vf_max(mold, mx);
        vf muse = vf_zero_if_neginf(mnew);
        vf alpha = vf_exp2(vf_sub(mold, muse));
        vf sum0 = vf_zero(), sum1 = vf_zero();
        for (int64_t x = 0; x < jn; x += 2) { /* jn is a multiple of MR: even */
            float *s = sc->s + x * Rp + i;
            vf p0 = vf_exp2(vf_sub(vf_load(s), muse));
            vf p1 = vf_exp2(vf_sub(vf_load(s + Rp), muse));
            vf_store(s, p0);
            vf_store(s + Rp, p1);
            sum0 = vf_add(sum0, p0);
            sum1 = vf_add(sum1, p1);
        }
        vf_store(sc->m + i, mnew);
        vf_store(sc->alpha + i, alpha);
        vf_store(sc->l + i, vf_fma(vf_load(sc->l + i), alpha, vf_add(sum0, sum1)));
    }
}

KENTRY void decode_item(void *ctx, int64_t item, void *scratch)
{
    const struct burst_cpu_decode_job *j = ctx;
    const struct burst_decode_args *a = j->a;
    const struct burst_tensor *q = a->q;
    const int64_t d = j->d, R = j->rows, Rp = (R + VL - 1) / VL * VL;
    const int64_t g = item / j->chunks, k0 = item % j->chunks * j->kpi;
    const int64_t k1 = burst_cpu_min64(k0 + j->kpi, j->kend);
    struct burst_cpu_decode_scratch sc = burst_cpu_decode_layout(scratch, d, R);

    const float qmul = a->scale * 1.4426950408889634f;
    for (int64_t r = 0; r < R; r++) {
        const int64_t i = r / j->group, h = g * j->group + r % j->group;
        load_row(sc.tmp,
                 (const char *)q->data + (size_t)(i * q->stride[1] + h * q->stride[2]) * j->esz,
                 q->dtype, d, qmul);
        for (int64_t c = 0; c < d; c++)
            sc.qt[c * Rp + r] = sc.tmp[c];
        /* query i sees the keys before tail + i + 1 */
        sc.kb[r] = 0;
        sc.ke[r] = burst_cpu_min64(a->tail + i + 1, j->kend);
    }
    for (int64_t c = 0; c < d && R < Rp; c++)
        memset(sc.qt + c * Rp + R, 0, sizeof(float) * (size_t)(Rp - R));
    for (int64_t r = R; r < Rp; r++)
        sc.kb[r] = sc.ke[r] = 0;
    memset(sc.o, 0, sizeof(float) * (size_t)(R * d));
    memset(sc.s + BURST_CPU_DECODE_BT * Rp, 0,
           sizeof(float) * BURST_CPU_MR); /* read past by gemm */
    for (int64_t r = 0; r < Rp; r++) {
        sc.m[r] = -(float)INFINITY;
        sc.l[r] = 0.0f;
    }
    /* every row sees the keys before min(tail + 1, kend): tiles inside that need no mask */
    const int64_t all = burst_cpu_min64(a->tail + 1, j->kend);

    for (int64_t j0 = k0; j0 < k1; j0 += BURST_CPU_DECODE_BT) {
        const int64_t cnt = burst_cpu_min64(BURST_CPU_DECODE_BT, k1 - j0);
        const int64_t jn = (cnt + BURST_CPU_MR - 1) / BURST_CPU_MR * BURST_CPU_MR;
        decode_load_kv(j, &sc, g, j0, cnt, jn);
        if (j0 + BURST_CPU_DECODE_BT < k1) /* the next tile on its way while this one computes */
            decode_prefetch(j, g, j0 + BURST_CPU_DECODE_BT,
                            burst_cpu_min64(BURST_CPU_DECODE_BT, k1 - j0 - BURST_CPU_DECODE_BT));
        gemm(jn, Rp, d, sc.k, d, 1, sc.qt, Rp, sc.s, Rp, BURST_CPU_STORE, NULL);
        if (a->softcap > 0.0f)
            cap_tile(sc.s, Rp, 0, Rp, jn, a->softcap * 1.4426950408889634f);
        if (jn > cnt || j0 + cnt > all)
            mask_tile(sc.s, Rp, 0, Rp, cnt, jn, j0, sc.kb, sc.ke, sc.kbf, sc.kef);
        decode_softmax(&sc, jn, Rp);
        gemm(R, d, jn, sc.s, 1, Rp, sc.v, d, sc.o, d, BURST_CPU_SCALE, sc.alpha);
    }

    float *part = j->part + (size_t)(item * R * (d + 2));
    for (int64_t r = 0; r < R; r++) {
        float *p = part + r * (d + 2);
        memcpy(p, sc.o + r * d, sizeof(float) * (size_t)d);
        p[d] = sc.m[r] * 0.69314718055994530942f; /* natural units */
        p[d + 1] = sc.l[r];
    }
}
