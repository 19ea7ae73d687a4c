/* tools/job_docs.c - packed documents of a job (burstrun --docs): parsing, the lengths drawn
 * from the seed, and the allowed pairs they leave. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"

int job_docs_parse(const char *val, struct job_params *p, char *msg, size_t cap)
{
    char *end;
    if (!strncmp(val, "random:", 7)) {
        errno = 0;
        long long k = strtoll(val + 7, &end, 10);
        if (errno || end == val + 7 || *end || k < 1 || k > JOB_MAX_DOCS) {
            snprintf(msg, cap,
                     "bad value for --docs: '%s' (expected random:K with K in 1..%d, or "
                     "L1,L2,... lengths >= 1)",
                     val, JOB_MAX_DOCS);
            return -1;
        }
        p->docs_random = 1;
        p->num_docs = k;
        return 0;
    }
    int n = job_list_count(val);
    if (n < 1 || n > JOB_MAX_DOCS) {
        snprintf(msg, cap, "bad value for --docs: '%.40s' (expected 1..%d lengths, or random:K)",
                 val, JOB_MAX_DOCS);
        return -1;
    }
    for (int e = 0; e < n; e++) {
        char ent[64];
        job_list_entry(val, e, ent, sizeof(ent));
        errno = 0;
        long long len = strtoll(ent, &end, 10);
        if (errno || end == ent || *end || len < 1) {
            snprintf(msg, cap,
                     "bad value for --docs: entry %d is '%s' (expected an integer >= 1, or "
                     "random:K)",
                     e, ent);
            return -1;
        }
        p->doc_lens[e] = len;
    }
    p->docs_random = 0;
    p->num_docs = n;
    return 0;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int job_docs_resolve(struct job_params *p, char *msg, size_t cap)
{
    const int64_t n = p->seq_len, k = p->num_docs;
    if (k == 0)
        return 0;
    if (k > n) {
        snprintf(msg, cap, "--docs: %lld documents do not fit --seq %lld (each needs a token)",
                 (long long)k, (long long)n);
        return -1;
    }
    if (p->docs_random) {
        /* K - 1 cut points: uniform draws over the N - K tokens beyond one per document,
         * sorted; document t gets one token plus the gap between cuts t - 1 and t */
        uint64_t s = p->seed ^ 0x646f63756d656e74ull;
        int64_t *cut = p->doc_lens; /* the cuts, then the lengths, in place */
        for (int64_t t = 0; t < k - 1; t++)
            cut[t] = (int64_t)(splitmix(&s) % (uint64_t)(n - k + 1));
        qsort(cut, (size_t)(k - 1), sizeof(int64_t), cmp_i64);
        int64_t prev = 0;
        for (int64_t t = 0; t < k - 1; t++) {
            int64_t c = cut[t];
            cut[t] = 1 + c - prev;
            prev = c;
        }
        cut[k - 1] = 1 + (n - k) - prev;
        return 0;
    }
    int64_t sum = 0;
    for (int64_t t = 0; t < k; t++)
        sum += p->doc_lens[t];
    if (sum != n) {
        snprintf(msg, cap, "--docs: the %lld lengths sum to %lld, not --seq %lld", (long long)k,
                 (long long)sum, (long long)n);
        return -1;
    }
    return 0;
}

double job_pairs(const struct job_params *p)
{
    if (p->num_docs <= 1)
        return job_allowed_pairs(p->seq_len, p->causal, p->window_left, p->window_right);
    double pairs = 0.0; /* each document alone is a sequence of its length */
    for (int64_t t = 0; t < p->num_docs; t++)
        pairs += job_allowed_pairs(p->doc_lens[t], p->causal, p->window_left, p->window_right);
    return pairs;
}
