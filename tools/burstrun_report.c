/*
 * tools/burstrun_report.c - burstrun's report of a job's results: the table, the JSON object, a
 * sweep's rows and the --csv rows (tools/burstrun_report.h).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burst/burst.h"
#include "burstrun_meta.h"
#include "burstrun_report.h"
#include "job_kv.h"

const char *const burstrun_dtype_names[3] = {"fp32", "fp16", "bf16"};
const char *const burstrun_layout_names[3] = {"natural", "zigzag", "striped"};
const char *const burstrun_bwd_names[3] = {"burst", "ring", "auto"};

static const char *human_bytes(double x, char *buf, size_t n)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (x >= 1024.0 && u < 4) {
        x /= 1024.0;
        u++;
    }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", x, unit[u]);
    return buf;
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void json_num(double x)
{
    if (isfinite(x))
        printf("%.6g", x);
    else
        printf("null");
}

/* A further member of a JSON object: `, "name": x` (null when x is not finite). */
static void json_field(const char *name, double x)
{
    printf(", \"%s\": ", name);
    json_num(x);
}

/* A job's figures beside its times: work, TFLOP/s, and the check per tensor. */
struct summary {
    double fwd_flops, pairs;
    double tf_fwd, tf_bwd, tf_fb;
    double max_abs, max_rel;
    const char *check; /* pass / fail / skipped */
    int tensor_ok[JOB_NTENSORS];
    int tensor_checked[JOB_NTENSORS];
};

/* s from the job and its result. */
static void summarise(const struct job_params *p, const struct job_result *r, struct summary *s)
{
    memset(s, 0, sizeof(*s));
    s->pairs = job_pairs(p);
    s->fwd_flops = job_fwd_flops(p);
    s->tf_fwd = r->fwd_s > 0 ? s->fwd_flops / r->fwd_s / 1e12 : 0;
    s->tf_bwd = r->bwd_s > 0 ? 2.5 * s->fwd_flops / r->bwd_s / 1e12 : 0;
    s->tf_fb = p->run_bwd && r->fwd_s + r->bwd_s > 0
                   ? 3.5 * s->fwd_flops / (r->fwd_s + r->bwd_s) / 1e12
                   : 0;
    s->check = "skipped";
    if (!r->checked_fwd_rows)
        return;
    int ok = 1;
    for (int t = 0; t < JOB_NTENSORS; t++) {
        s->tensor_checked[t] =
            t == JOB_DSINKS ? p->sinks && r->checked_bwd : t <= JOB_LSE || r->checked_bwd;
        if (!s->tensor_checked[t])
            continue;
        double rel = job_err_rel(&r->err[t], (enum job_tensor)t);
        double abs_err = r->err[t].nonfinite ? INFINITY : r->err[t].max_abs;
        s->max_abs = abs_err > s->max_abs ? abs_err : s->max_abs;
        s->max_rel = rel > s->max_rel ? rel : s->max_rel;
        s->tensor_ok[t] = rel <= job_tolerance(p);
        ok &= s->tensor_ok[t];
    }
    s->check = ok ? "pass" : "fail";
}

/* Mean over ranks of compute_s / steps and wait_s / steps of the last call of a phase. */
static void per_step(const struct job_params *p, const struct job_result *r, int phase,
                     double *compute_p, double *wait_p)
{
    double c = 0.0, w = 0.0;
    int n = 0;
    for (int rk = 0; r->rank_stats && rk < p->ranks; rk++) {
        const struct burst_phase_stats *st =
            phase ? &r->rank_stats[rk].bwd : &r->rank_stats[rk].fwd;
        if (st->steps > 0) {
            c += st->compute_s / st->steps;
            w += st->wait_s / st->steps;
            n++;
        }
    }
    *compute_p = n ? c / n : NAN;
    *wait_p = n ? w / n : NAN;
}

/* The forward's ideal time on ranks of the measured speeds: total work (allowed query/key pairs
 * times batch and query heads, the unit of the speeds) over the sum of the speeds. NAN without
 * measured speeds. */
static double ideal_fwd_s(const struct job_params *p, const struct job_result *r)
{
    double sum = 0.0;
    for (int rk = 0; r->rank_speeds && rk < p->ranks; rk++)
        sum += r->rank_speeds[rk];
    if (!(sum > 0.0))
        return NAN;
    return job_pairs(p) * (double)p->batch * p->q_heads / sum;
}

/* "docs": the documents of a packed job (--docs): their count, how they were chosen, and
 * their lengths (up to 64 of them) or a summary (min, max, mean) */
static void print_json_docs(const struct job_params *p)
{
    if (p->num_docs <= 0)
        return;
    int64_t min = p->doc_lens[0], max = p->doc_lens[0];
    for (int64_t t = 1; t < p->num_docs; t++) {
        min = p->doc_lens[t] < min ? p->doc_lens[t] : min;
        max = p->doc_lens[t] > max ? p->doc_lens[t] : max;
    }
    printf(", \"docs\": {\"count\": %lld, \"mode\": \"%s\", \"min\": %lld, \"max\": %lld, "
           "\"mean\": %.6g",
           (long long)p->num_docs, p->docs_random ? "random" : "given", (long long)min,
           (long long)max, (double)p->seq_len / (double)p->num_docs);
    if (p->num_docs <= 64) {
        printf(", \"lens\": [");
        for (int64_t t = 0; t < p->num_docs; t++)
            printf("%s%lld", t ? ", " : "", (long long)p->doc_lens[t]);
        printf("]");
    }
    printf("}");
}

/* The job's members of --json (without braces): problem, timings, statistics, check. */
static void print_json_job(const struct report_opts *o, const struct job_params *p,
                           const struct job_result *r, const struct summary *s)
{
    int checked = r->checked_fwd_rows > 0;
    printf("\"version\": ");
    json_str(burst_version_string());
    printf(", \"backend\": ");
    json_str(r->backend);
    printf(", \"ranks\": %d, \"threads\": %d, \"rank_mode\": ", p->ranks, r->num_threads);
    json_str(r->rank_mode);
    printf(", \"fabric\": ");
    json_str(r->fabric);
    printf(", \"transfers\": ");
    json_str(r->transfers);
    printf(", \"head_groups\": %d", r->head_groups);
    printf(", \"hosts\": %d", r->hosts);
    printf(", \"batch\": %lld, \"seq\": %lld, \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d",
           (long long)p->batch, (long long)p->seq_len, p->q_heads, p->kv_heads, p->head_dim);
    printf(", \"dtype\": \"%s\", \"causal\": %s, \"layout\": \"%s\"",
           burstrun_dtype_names[p->dtype], p->causal ? "true" : "false",
           burstrun_layout_names[p->layout]);
    printf(", \"window\": [%lld, %lld]", (long long)p->window_left, (long long)p->window_right);
    printf(", \"softcap\": %.9g, \"sinks\": %s", (double)p->softcap, p->sinks ? "true" : "false");
    printf(", \"fp8_forward\": %s", p->fp8 ? "true" : "false");
    printf(", \"bwd\": \"%s\", \"bwd_requested\": \"%s\"",
           p->run_bwd ? burstrun_bwd_names[r->bwd_used] : "none", burstrun_bwd_names[p->bwd]);
    json_field("cpu_share", r->cpu_share);
    printf(", \"seed\": %" PRIu64 ", \"warmup\": %d, \"iters\": %d", p->seed, p->warmup,
           r->iters_done);
    printf(", \"allowed_pairs\": %.0f, \"flops_fwd\": %.6g", s->pairs, s->fwd_flops);
    printf(", \"default_job\": %s", o->default_job ? "true" : "false");
    json_field("fwd_ms", r->fwd_s * 1e3);
    json_field("fwd_ms_min", r->fwd_min_s * 1e3);
    json_field("fwd_ms_max", r->fwd_max_s * 1e3);
    json_field("bwd_ms", p->run_bwd ? r->bwd_s * 1e3 : NAN);
    json_field("bwd_ms_min", p->run_bwd ? r->bwd_min_s * 1e3 : NAN);
    json_field("bwd_ms_max", p->run_bwd ? r->bwd_max_s * 1e3 : NAN);
    json_field("tflops_fwd", s->tf_fwd);
    json_field("tflops_bwd", p->run_bwd ? s->tf_bwd : NAN);
    json_field("tflops_fwd_bwd", p->run_bwd ? s->tf_fb : NAN);
    json_field("tflops_fwd_per_rank", s->tf_fwd / p->ranks);
    json_field("tflops_fwd_bwd_per_rank", p->run_bwd ? s->tf_fb / p->ranks : NAN);
    printf(", \"bytes_fwd_per_rank\": %" PRIu64 ", \"bytes_bwd_per_rank\": %" PRIu64, r->bytes_fwd,
           r->bytes_bwd);
    printf(", \"msgs_fwd_per_rank\": %" PRIu64 ", \"msgs_bwd_per_rank\": %" PRIu64, r->msgs_fwd,
           r->msgs_bwd);
    printf(", \"scratch_fwd_per_rank\": %" PRIu64 ", \"scratch_bwd_per_rank\": %" PRIu64,
           r->scratch_fwd, r->scratch_bwd);
    printf(", \"overlap\": {\"fwd\": ");
    json_num(job_overlap(r, 0));
    json_field("bwd", p->run_bwd ? job_overlap(r, 1) : NAN);
    printf("}");
    for (int ph = 0; ph < 1 + p->run_bwd; ph++) {
        double c, w;
        per_step(p, r, ph, &c, &w);
        printf(", \"%s_step_ms\": {\"compute\": ", ph ? "bwd" : "fwd");
        json_num(c * 1e3);
        json_field("wait", w * 1e3);
        printf("}");
    }
    if (r->rank_stats) {
        printf(", \"per_rank\": [");
        for (int rk = 0; rk < p->ranks; rk++) {
            printf("%s{\"rank\": %d", rk ? ", " : "", rk);
            for (int ph = 0; ph < 1 + p->run_bwd; ph++) {
                const struct burst_phase_stats *st =
                    ph ? &r->rank_stats[rk].bwd : &r->rank_stats[rk].fwd;
                printf(", \"%s\": {\"steps\": %d, \"compute_ms\": ", ph ? "bwd" : "fwd", st->steps);
                json_num(st->compute_s * 1e3);
                json_field("wait_ms", st->wait_s * 1e3);
                json_field("total_ms", st->total_s * 1e3);
                printf("}");
            }
            printf("}");
        }
        printf("]");
    }
    if (p->want_hash)
        printf(", \"output_hash\": \"%016" PRIx64 "\"", r->output_hash);
    static const char *const wmodes[] = {"even", "given", "auto"};
    printf(", \"weights\": \"%s\"", wmodes[p->weights_mode]);
    print_json_docs(p);
    if (r->shard_lens) {
        printf(", \"shard_lens\": [");
        for (int rk = 0; rk < p->ranks; rk++)
            printf("%s%lld", rk ? ", " : "", (long long)r->shard_lens[rk]);
        printf("]");
    }
    if (r->rank_speeds) {
        printf(", \"rank_speeds\": [");
        for (int rk = 0; rk < p->ranks; rk++) {
            printf("%s", rk ? ", " : "");
            json_num(r->rank_speeds[rk]);
        }
        printf("], \"shard_speeds\": [");
        for (int rk = 0; rk < p->ranks; rk++) {
            printf("%s", rk ? ", " : "");
            json_num(r->shard_speeds ? r->shard_speeds[rk] : 0.0);
        }
        printf("], \"ideal_fwd_ms\": ");
        json_num(ideal_fwd_s(p, r) * 1e3);
    }
    printf(", \"peak_rss_bytes\": %" PRIu64 ", \"job_tensor_bytes\": %" PRIu64, r->peak_rss,
           r->caller_bytes);
    json_field("max_abs_err", checked ? s->max_abs : NAN);
    json_field("max_rel_err", checked ? s->max_rel : NAN);
    json_field("tolerance", checked ? job_tolerance(p) : NAN);
    printf(", \"check_scope\": \"%s\"", !checked         ? "none"
                                        : r->checked_bwd ? "fwd+bwd"
                                                         : "fwd-sampled-rows");
    if (checked) {
        printf(", \"errors\": {");
        int first = 1;
        for (int t = 0; t < JOB_NTENSORS; t++) {
            if (!s->tensor_checked[t])
                continue;
            printf("%s\"%s\": {\"max_abs\": ", first ? "" : ", ",
                   job_tensor_name((enum job_tensor)t));
            json_num(r->err[t].nonfinite ? INFINITY : r->err[t].max_abs);
            json_field("rel", job_err_rel(&r->err[t], (enum job_tensor)t));
            printf(", \"nonfinite\": %lld}", (long long)r->err[t].nonfinite);
            first = 0;
        }
        printf("}");
    }
    printf(", \"check\": \"%s\"", s->check);
}

/* --json's error member: burstrun's exit status and why. */
static void json_error(int code, const char *msg)
{
    printf(", \"error\": {\"exit_code\": %d, \"message\": ", code);
    meta_json_str(stdout, msg);
    printf("}");
}

#define CHECK_FAILED_MSG "the check against the fp64 reference failed"

/* The one JSON object of a job: the metadata, the job's members, and an error member when the
 * check failed. */
static void print_json(const struct report_opts *o, const struct job_params *p,
                       const struct job_result *r, const struct summary *s)
{
    printf("{");
    meta_json_fields(stdout, 1);
    printf(", ");
    print_json_job(o, p, r, s);
    if (!strcmp(s->check, "fail"))
        json_error(EXIT_CHECK_FAILED, CHECK_FAILED_MSG);
    printf("}\n");
}

/* The report's line of a packed job's documents (the first 16 lengths). */
static void print_text_docs(const struct job_params *p)
{
    if (p->num_docs <= 0)
        return;
    printf("docs     %lld document(s)%s:", (long long)p->num_docs,
           p->docs_random ? " of random lengths" : "");
    for (int64_t t = 0; t < p->num_docs && t < 16; t++)
        printf(" %lld", (long long)p->doc_lens[t]);
    printf("%s\n", p->num_docs > 16 ? " ..." : "");
}

/* "compute / wait" ms per step and the overlap cell of one phase. */
static void step_cells(const struct job_params *p, const struct job_result *r, int phase, char *cw,
                       size_t cwn, char *ov, size_t ovn)
{
    double c, w;
    per_step(p, r, phase, &c, &w);
    if (isfinite(c))
        snprintf(cw, cwn, "%.3f / %.3f", c * 1e3, w * 1e3);
    else
        snprintf(cw, cwn, "-");
    double x = job_overlap(r, phase);
    if (isfinite(x))
        snprintf(ov, ovn, "%.1f%%", 100.0 * x);
    else
        snprintf(ov, ovn, "-");
}

/* The job's table: the setting, the problem, the work, a row per phase, memory, the check. */
static void print_table(const struct report_opts *o, const struct job_params *p,
                        const struct job_result *r, const struct summary *s)
{
    char b1[32], b2[32], b3[32];
    if (o->threads)
        printf("burstrun %s: %d rank%s as threads of one process, backend %s (%d compute "
               "threads), seed %" PRIu64 "%s\n",
               burst_version_string(), p->ranks, p->ranks > 1 ? "s" : "", r->backend,
               r->num_threads, p->seed, o->seed_given ? "" : " (from the clock)");
    else
        printf("burstrun %s: %d rank process%s on %d host%s, fabric %s, backend %s (%d compute "
               "threads each), seed %" PRIu64 "%s\n",
               burst_version_string(), p->ranks, p->ranks > 1 ? "es" : "", r->hosts,
               r->hosts > 1 ? "s" : "", r->fabric, r->backend, r->num_threads, p->seed,
               o->seed_given ? "" : " (from the clock)");
    if (o->launch_used && o->launch_used[0])
        printf("ranks joined through %s\n", o->launch_used);
    if (strcmp(r->transfers, "host") != 0 && r->transfers[0])
        printf(
            "blocks travel %s\n",
            !strcmp(r->transfers, "device") ? "device to device (no host hop)"
            : !strcmp(r->transfers, "device+staged")
                ? "device to device inside a host, through page-locked host staging between hosts"
                : "through page-locked host staging");
    if (r->head_groups > 1)
        printf("each call runs the ring once per group of heads: %d groups (--workspace)\n",
               r->head_groups);
    if (o->default_job)
        printf("default job: burstrun -n 4 --seq 2048 --heads 4 --head-dim 64 --causal --layout "
               "zigzag --check\n");
    char win[80];
    if (p->window_left < 0 && p->window_right < 0)
        snprintf(win, sizeof(win), "none");
    else
        snprintf(win, sizeof(win), "%lld,%lld", (long long)p->window_left,
                 (long long)p->window_right);
    printf("problem  B=%lld N=%lld Hq=%d Hkv=%d d=%d %s%s, %s, layout %s, window %s, bwd %s\n",
           (long long)p->batch, (long long)p->seq_len, p->q_heads, p->kv_heads, p->head_dim,
           burstrun_dtype_names[p->dtype], p->fp8 ? " on fp8 (e4m3) products" : "",
           p->causal ? "causal" : "non-causal", burstrun_layout_names[p->layout], win,
           p->run_bwd ? burstrun_bwd_names[r->bwd_used] : "not run");
    print_text_docs(p);
    if (p->softcap > 0.0f || p->sinks) {
        char cap[32] = "off";
        if (p->softcap > 0.0f)
            snprintf(cap, sizeof(cap), "%g", (double)p->softcap);
        printf("         softcap %s, sinks %s\n", cap,
               p->sinks ? "one per query head (from the seed)" : "none");
    }
    if (p->weights_mode != JOB_WEIGHTS_EVEN && r->shard_lens) {
        printf("shards   %s:",
               p->weights_mode == JOB_WEIGHTS_MEASURED ? "by measured speed" : "by --weights");
        for (int rk = 0; rk < p->ranks && rk < 16; rk++)
            printf(" %lld", (long long)r->shard_lens[rk]);
        printf("%s", p->ranks > 16 ? " ..." : "");
        if (r->rank_speeds)
            printf("; ideal forward %.3f ms (work / sum of rank speeds)", ideal_fwd_s(p, r) * 1e3);
        printf("\n");
        if (r->rank_speeds && r->shard_speeds) { /* the two rounds of runtime/speed.h */
            printf("speeds   rows x keys x heads / s, full load:");
            for (int rk = 0; rk < p->ranks && rk < 16; rk++)
                printf(" %.3g", r->rank_speeds[rk]);
            printf("; on the shard (sized it):");
            for (int rk = 0; rk < p->ranks && rk < 16; rk++)
                printf(" %.3g", r->shard_speeds[rk]);
            printf("%s\n", p->ranks > 16 ? " ..." : "");
        }
    }
    double n2 = (double)p->seq_len * (double)p->seq_len;
    printf("work     allowed pairs %.0f (%.2f%% of N^2); forward %.4g GFLOP, fwd+bwd %.4g GFLOP\n",
           s->pairs, 100.0 * s->pairs / n2, s->fwd_flops / 1e9, 3.5 * s->fwd_flops / 1e9);
    printf("timing   %d warm-up + %d timed iterations; median (min) wall time of the ring; "
           "cpu share %.0f%%\n\n",
           p->warmup, r->iters_done, 100.0 * r->cpu_share);

    printf("%-9s %22s %9s %12s %13s %6s %6s %13s %9s %20s %7s\n", "phase", "time ms (min)",
           "TFLOP/s", "TFLOP/s/rank", "sent/rank", "msgs", "steps", "scratch/rank", "wait ms",
           "step compute/wait", "overlap");
    char t[48], cw[48], ov[16];
    step_cells(p, r, 0, cw, sizeof(cw), ov, sizeof(ov));
    snprintf(t, sizeof(t), "%.3f (%.3f)", r->fwd_s * 1e3, r->fwd_min_s * 1e3);
    printf("%-9s %22s %9.4f %12.4f %13s %6" PRIu64 " %6d %13s %9.3f %20s %7s\n", "forward", t,
           s->tf_fwd, s->tf_fwd / p->ranks, human_bytes((double)r->bytes_fwd, b1, sizeof(b1)),
           r->msgs_fwd, r->steps_fwd, human_bytes((double)r->scratch_fwd, b2, sizeof(b2)),
           r->wait_fwd_s * 1e3, cw, ov);
    if (p->run_bwd) {
        step_cells(p, r, 1, cw, sizeof(cw), ov, sizeof(ov));
        snprintf(t, sizeof(t), "%.3f (%.3f)", r->bwd_s * 1e3, r->bwd_min_s * 1e3);
        printf("%-9s %22s %9.4f %12.4f %13s %6" PRIu64 " %6d %13s %9.3f %20s %7s\n", "backward", t,
               s->tf_bwd, s->tf_bwd / p->ranks, human_bytes((double)r->bytes_bwd, b1, sizeof(b1)),
               r->msgs_bwd, r->steps_bwd, human_bytes((double)r->scratch_bwd, b2, sizeof(b2)),
               r->wait_bwd_s * 1e3, cw, ov);
        snprintf(t, sizeof(t), "%.3f", (r->fwd_s + r->bwd_s) * 1e3);
        printf("%-9s %22s %9.4f %12.4f %13s\n", "fwd+bwd", t, s->tf_fb, s->tf_fb / p->ranks,
               human_bytes((double)(r->bytes_fwd + r->bytes_bwd), b1, sizeof(b1)));
    }
    printf("\nmemory   peak RSS %s%s (the job's global tensors: %s%s)\n",
           human_bytes((double)r->peak_rss, b1, sizeof(b1)),
           o->threads ? "" : " of the largest rank process",
           human_bytes((double)r->caller_bytes, b3, sizeof(b3)),
           o->threads      ? ""
           : o->mpi_worker ? ", a private copy in every rank process"
                           : ", shared by the ranks");
    if (o->verbose && r->rank_stats) {
        printf("\nper rank (last call)     %-32s %s\n", "forward: compute / wait / total ms",
               p->run_bwd ? "backward: compute / wait / total ms" : "");
        for (int rk = 0; rk < p->ranks; rk++) {
            const struct burst_phase_stats *f = &r->rank_stats[rk].fwd, *b = &r->rank_stats[rk].bwd;
            printf("  rank %-5d steps %-4d %9.3f / %8.3f / %8.3f", rk, f->steps, f->compute_s * 1e3,
                   f->wait_s * 1e3, f->total_s * 1e3);
            if (p->run_bwd)
                printf("    %9.3f / %8.3f / %8.3f", b->compute_s * 1e3, b->wait_s * 1e3,
                       b->total_s * 1e3);
            printf("\n");
        }
    }
    if (p->want_hash)
        printf("hash     output FNV-1a %016" PRIx64 "\n", r->output_hash);

    if (!r->checked_fwd_rows) {
        printf("check    skipped (pass --check or --check-fwd-only)\n");
        return;
    }
    printf("check    fp64 reference: forward on %d of %lld rows, backward %s; tolerance %.3g "
           "of max |ref|\n",
           r->checked_fwd_rows, (long long)p->seq_len, r->checked_bwd ? "in full" : "not checked",
           job_tolerance(p));
    printf("         %-6s %12s %12s %12s\n", "tensor", "max abs err", "max |ref|", "rel err");
    for (int i = 0; i < JOB_NTENSORS; i++) {
        if (!s->tensor_checked[i])
            continue;
        const struct job_err *e = &r->err[i];
        printf("         %-6s %12.3e %12.3e %12.3e  %s", job_tensor_name((enum job_tensor)i),
               e->max_abs, e->max_ref, job_err_rel(e, (enum job_tensor)i),
               s->tensor_ok[i] ? "ok" : "FAIL");
        if (e->nonfinite)
            printf(" (%lld non-finite values)", (long long)e->nonfinite);
        printf("\n");
    }
    printf("result   %s\n", strcmp(s->check, "pass") == 0 ? "PASS" : "FAIL");
}

int report_job(const struct report_opts *o, const struct job_params *p, const struct job_result *r)
{
    if (p->kv_decode > 0) { /* an inference job (tools/job_kv.h) */
        if (o->json) {
            printf("{");
            meta_json_fields(stdout, 1);
            printf(", ");
        }
        int failed = job_kv_print(stdout, p, r, o->json);
        if (o->json)
            printf("}\n");
        return failed ? EXIT_CHECK_FAILED : 0;
    }
    struct summary s;
    summarise(p, r, &s);
    if (o->json)
        print_json(o, p, r, &s);
    else
        print_table(o, p, r, &s);
    return strcmp(s.check, "fail") == 0 ? EXIT_CHECK_FAILED : 0;
}

/* ---- the header, sweep rows and --csv ---- */

void report_header(const struct report_opts *o, const struct job_params *p)
{
    char host[256], ts[64];
    meta_host(host, sizeof(host));
    meta_timestamp(ts, sizeof(ts));
    printf("# burstrun %s (library %s), commit %s, features: %s\n", BURST_VERSION_STRING,
           burst_version_string(), meta_commit(), meta_features());
    printf("# host %s, %s, seed %" PRIu64 "%s\n", host, ts, p->seed,
           o->seed_given ? "" : " (from the clock)");
    printf("# %d rank%s as %s, backend %s\n", p->ranks, p->ranks > 1 ? "s" : "",
           o->threads ? "threads of one process" : "processes", o->backend);
    meta_devices_text(stdout, "# ");
    fflush(stdout);
}

/* A sweep's constant problem and the columns of its rows. */
static void print_sweep_columns(const struct job_params *p)
{
    printf("# problem B=%lld Hq=%d Hkv=%d, %s, layout %s, bwd %s; %d warm-up + %d timed "
           "iterations, times in ms: median (min, max) of the ring\n#\n",
           (long long)p->batch, p->q_heads, p->kv_heads, p->causal ? "causal" : "non-causal",
           burstrun_layout_names[p->layout], p->run_bwd ? burstrun_bwd_names[p->bwd] : "not run",
           p->warmup, p->iters);
    printf("# %9s %5s %4s %10s %10s %10s %9s %10s %10s %10s %9s %9s %7s\n", "seq", "dtype", "d",
           "fwd", "(min", "max)", "TFLOP/s", "bwd", "(min", "max)", "TFLOP/s", "f+b TF/s", "check");
    fflush(stdout);
}

/* One row of a sweep, as soon as its job finished. */
static void print_row(const struct job_params *p, const struct job_result *r,
                      const struct summary *s)
{
    printf("  %9lld %5s %4d %10.3f %10.3f %10.3f %9.4f", (long long)p->seq_len,
           burstrun_dtype_names[p->dtype], p->head_dim, r->fwd_s * 1e3, r->fwd_min_s * 1e3,
           r->fwd_max_s * 1e3, s->tf_fwd);
    if (p->run_bwd)
        printf(" %10.3f %10.3f %10.3f %9.4f %9.4f", r->bwd_s * 1e3, r->bwd_min_s * 1e3,
               r->bwd_max_s * 1e3, s->tf_bwd, s->tf_fb);
    else
        printf(" %10s %10s %10s %9s %9s", "-", "-", "-", "-", "-");
    printf(" %7s\n", s->check);
    fflush(stdout);
}

/* --csv: the header line (before the first row), then one row per job. */
static void csv_row(FILE *f, const struct job_params *p, const struct job_result *r,
                    const struct summary *s, int first)
{
    if (first)
        fprintf(f, "seq,dtype,head_dim,batch,heads,kv_heads,ranks,rank_mode,backend,fabric,"
                   "causal,layout,bwd,iters,fwd_ms,fwd_ms_min,fwd_ms_max,bwd_ms,bwd_ms_min,"
                   "bwd_ms_max,tflops_fwd,tflops_bwd,tflops_fwd_bwd,check\n");
    fprintf(f, "%lld,%s,%d,%lld,%d,%d,%d,%s,\"%s\",%s,%d,%s,%s,%d,%.6g,%.6g,%.6g,",
            (long long)p->seq_len, burstrun_dtype_names[p->dtype], p->head_dim, (long long)p->batch,
            p->q_heads, p->kv_heads, p->ranks, r->rank_mode, r->backend, r->fabric, p->causal,
            burstrun_layout_names[p->layout], p->run_bwd ? burstrun_bwd_names[r->bwd_used] : "none",
            r->iters_done, r->fwd_s * 1e3, r->fwd_min_s * 1e3, r->fwd_max_s * 1e3);
    if (p->run_bwd)
        fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%s\n", r->bwd_s * 1e3, r->bwd_min_s * 1e3,
                r->bwd_max_s * 1e3, s->tf_fwd, s->tf_bwd, s->tf_fb, s->check);
    else
        fprintf(f, ",,,%.6g,,,%s\n", s->tf_fwd, s->check);
    fflush(f);
}

void report_csv_row(FILE *f, const struct job_params *p, const struct job_result *r, int first)
{
    struct summary s;
    summarise(p, r, &s);
    csv_row(f, p, r, &s, first);
}

void report_json_failure(int code, const char *msg)
{
    printf("{");
    meta_json_fields(stdout, 1);
    json_error(code, msg);
    printf("}\n");
}

/* ---- sweeps ---- */

void report_sweep_begin(const struct report_opts *o, const struct job_params *p)
{
    if (o->json) {
        printf("{");
        meta_json_fields(stdout, 1);
        printf(", \"results\": [");
    } else {
        report_header(o, p);
        print_sweep_columns(p);
    }
}

int report_sweep_point(const struct report_opts *o, const struct job_params *p,
                       const struct job_result *r, int i)
{
    struct summary s;
    summarise(p, r, &s);
    if (o->json) {
        printf("%s{", i ? ", " : "");
        print_json_job(o, p, r, &s);
        printf("}");
        fflush(stdout);
    } else {
        print_row(p, r, &s);
    }
    if (o->csv)
        csv_row(o->csv, p, r, &s, i == 0);
    return !strcmp(s.check, "fail") ? EXIT_CHECK_FAILED : 0;
}

void report_sweep_end(const struct report_opts *o, int rc, const char *msg)
{
    if (o->json) {
        printf("]");
        if (rc)
            json_error(rc, rc == EXIT_CHECK_FAILED ? CHECK_FAILED_MSG : msg);
        printf("}\n");
    }
}
