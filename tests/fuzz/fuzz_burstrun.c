/*
 * tests/fuzz/fuzz_burstrun.c - libFuzzer target: burstrun's command line (tools/burstrun.c,
 * parse_args with its flag table, --hosts / --hostfile, numbers, choices, cross-checks).
 *
 * tools/burstrun.c is compiled into this file unchanged, with its main() renamed and exit()
 * replaced by a longjmp back here, so that every flag, present and future, is fuzzed through the
 * real table. Input: the arguments, separated by NUL bytes (at most 32). "--info" is dropped: it
 * probes every device, which is not parsing.
 *
 * parse_args must either report a usage error (exit) or return options that satisfy the
 * invariants the job code relies on (checked below: among them, tensors whose sizes fit 64 bits
 * and this machine's memory); no crash, sanitizer report or leak.
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int burstrun_main(int argc, char **argv);
static void fuzz_exit(int status) __attribute__((noreturn));

#define main burstrun_main
#define exit fuzz_exit
#include "burstrun.c"
#undef exit
#undef main

static jmp_buf fuzz_jmp;

static void fuzz_exit(int status)
{
    longjmp(fuzz_jmp, status + 1);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static int quiet;
    if (!quiet) { /* --help and --version print to stdout: keep the log readable */
        int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            close(fd);
        }
        quiet = 1;
    }
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    static char arg0[] = "burstrun";
    char *argv[34] = {arg0};
    int argc = 1;
    for (char *p = text; p <= text + size && argc < 33; p += strlen(p) + 1)
        if (strcmp(p, "--info") != 0)
            argv[argc++] = p;
    if (size == 0)
        argc = 1;
    argv[argc] = NULL;
    static struct opts o; /* static: survives the longjmp */
    if (setjmp(fuzz_jmp) == 0) {
        parse_args(argc, argv, &o);
        const struct job_params *p = &o.jp;
        char msg[512];
        if (p->ranks < 1 || p->batch < 1 || p->q_heads < 1 || p->kv_heads < 1 ||
            p->q_heads % p->kv_heads || p->head_dim % 8 || p->head_dim < 8 || p->head_dim > 256 ||
            p->seq_len < p->ranks || !job_tensor_bytes(p, msg, sizeof(msg)) ||
            job_tensor_bytes(p, msg, sizeof(msg)) > job_memory_limit()) {
            fprintf(stderr, "parse_args accepted ranks %d batch %lld seq %lld heads %d/%d d %d\n",
                    p->ranks, (long long)p->batch, (long long)p->seq_len, p->q_heads, p->kv_heads,
                    p->head_dim);
            abort();
        }
    }
    unsetenv("BURST_FAULT"); /* --test-kill-step, --device set these */
    unsetenv("BURST_DEVICE");
    free(text);
    return 0;
}
