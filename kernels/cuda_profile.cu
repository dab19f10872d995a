/*
 * cuda_profile.cu — where a decode token's time goes (env THIN_CUDA_PROFILE=1).
 *
 * Each decode token first runs as usual through the graph, timed with events around the graph
 * (device time) and with the host clock around the whole forward (copy in, launch, copy out,
 * synchronise). Then the same token runs again eagerly, step by step, with an event after every
 * step: the position and token are unchanged, so the KV cache and outputs are rewritten with the
 * same values. A spin kernel ahead of the eager steps keeps the GPU busy while the host enqueues
 * them, so the events see device time rather than the host's launch rate (a token where enqueuing
 * outlasted the spin is counted as host-bound). The table goes to stderr when the session is
 * freed: per step label (summed over layers) µs per token, launches, weight bytes and GB/s.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_session.cuh"

#define PROF_SPIN_NS 4000000ull /* 4 ms: longer than enqueuing every step */

struct cuda_prof {
    cudaEvent_t *ev;        /* n_steps + 3: before the steps, after each, after the argmax */
    cudaEvent_t g0, g1;     /* around the graph */
    double *step_us;        /* per step, summed over tokens */
    unsigned long long *step_launches; /* per step, summed over tokens */
    uint32_t tokens, host_bound, pos_first, pos_last;
    double graph_us, wall_us, eager_us, enqueue_us, argmax_us;
};

double prof_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

__global__ void prof_spin_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

int prof_init(cuda_session *s) {
    const char *e = getenv("THIN_CUDA_PROFILE");
    if (!e || strcmp(e, "1") != 0) return 0;
    cuda_prof *p = (cuda_prof *)calloc(1, sizeof *p);
    if (!p) return cuda_failf(s, "out of memory");
    s->prof = p;
    uint32_t n_ev = s->n_steps + 3;
    p->ev = (cudaEvent_t *)calloc(n_ev, sizeof(cudaEvent_t));
    p->step_us = (double *)calloc(s->n_steps + 1, sizeof(double));
    p->step_launches = (unsigned long long *)calloc(s->n_steps + 1, sizeof(unsigned long long));
    if (!p->ev || !p->step_us || !p->step_launches) return cuda_failf(s, "out of memory");
    for (uint32_t i = 0; i < n_ev; i++) CK(s, cudaEventCreate(&p->ev[i]));
    CK(s, cudaEventCreate(&p->g0));
    CK(s, cudaEventCreate(&p->g1));
    return 0;
}

cudaEvent_t prof_graph_event(const cuda_session *s, int end) {
    return s->prof ? (end ? s->prof->g1 : s->prof->g0) : NULL;
}

int prof_decode(cuda_session *s, double graph_us, double wall_us) {
    cuda_prof *p = s->prof;
    const int lb = s->p->logits_buf;
    const uint32_t vocab = (uint32_t)s->p->buf_sizes[lb];
    double t0 = prof_now_us();
    prof_spin_kernel<<<1, 32, 0, s->st>>>(PROF_SPIN_NS);
    CK(s, cudaGetLastError());
    CK(s, cudaEventRecord(p->ev[0], s->st));
    for (uint32_t i = 0; i < s->n_steps; i++) {
        unsigned long long l0 = thin_cuda_launches;
        if (exec_steps_range(s, i, i + 1, 1)) return -1;
        p->step_launches[i] += thin_cuda_launches - l0;
        CK(s, cudaEventRecord(p->ev[i + 1], s->st));
    }
    unsigned long long l0 = thin_cuda_launches;
    CK(s, launch_argmax(s->d_argmax, s->buf[lb], vocab, vocab, 1, s->d_argpart, s->st));
    p->step_launches[s->n_steps] += thin_cuda_launches - l0;
    CK(s, cudaEventRecord(p->ev[s->n_steps + 1], s->st));
    double enq = prof_now_us() - t0;
    CK(s, cudaStreamSynchronize(s->st));
    for (uint32_t i = 0; i <= s->n_steps; i++) {
        float ms = 0.0f;
        CK(s, cudaEventElapsedTime(&ms, p->ev[i], p->ev[i + 1]));
        p->step_us[i] += 1e3 * ms;
        p->eager_us += 1e3 * ms;
    }
    if (p->tokens == 0) p->pos_first = s->cur_pos;
    p->pos_last = s->cur_pos;
    p->tokens++;
    p->host_bound += enq * 1e3 > (double)PROF_SPIN_NS;
    p->enqueue_us += enq;
    p->graph_us += graph_us;
    p->wall_us += wall_us;
    return 0;
}

/* The label of a step: its kind, or for a linear group the roles of its weights with the fused
 * parts ("norm+q+k+v+rope+kv", "gate+up+silu", "down+add"; "norm+gate+up+silu+down+add" for the
 * MLP kernel, whose down step runs nothing of its own for one row). */
static void step_label(const cuda_session *s, const step *st, char *buf, size_t len) {
    const plan *p = s->p;
    static const char *kinds[] = {"?", "embed", "rmsnorm", "linear", "head_rmsnorm", "rope",
                                  "attention", "add", "silu_mul", "bias", "gelu_tanh_mul", "softcap", "scale", "moe"};
    if (st->kind != STEP_LINEAR) {
        snprintf(buf, len, "%s%s%s", kinds[st->kind <= STEP_MOE ? st->kind : 0],
                 st->kind == STEP_ATTN && (st->hnorm_q >= 0 || st->hnorm_k >= 0) ? "+head_norms" : "",
                 st->kind == STEP_ATTN && !st->kv_fused ? "+rope+kv" : "");
        return;
    }
    size_t n = (size_t)snprintf(buf, len, "%s", st->norm_op >= 0 ? "norm+" : "");
    for (int k = 0; k < st->nseg && n < len; k++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", k ? "+" : "",
                              thin_role_name(p->ops[st->lin[k]].w_role));
    if (n < len)
        snprintf(buf + n, len - n, "%s%s%s%s%s%s", st->pair ? "+silu" : "",
                 st->add_op >= 0 ? "+add" : "", st->bias[0] >= 0 || st->bias[1] >= 0 || st->bias[2] >= 0 ? "+bias" : "",
                 st->attn_step >= 0 ? "+rope+kv" : "",
                 st->mlp ? "+down+add" : "",
                 st->mlp_fused ? " (in the MLP kernel)" : "");
}

static uint64_t weight_bytes(const dmat *w) {
    const uint64_t rows = w->trans ? w->cols : w->rows; /* stored rows */
    return rows * w->pitch * thin_dtype_size((thin_dtype)w->dtype) +
           (w->scale ? (uint64_t)w->rows * sizeof(float) : 0);
}

/* Weight bytes a step reads for one row (the MLP kernel's: gate, up and down). */
static uint64_t step_bytes(const cuda_session *s, const step *st) {
    if (st->kind != STEP_LINEAR || st->mlp_fused) return 0;
    uint64_t b = 0;
    for (int k = 0; k < st->nseg; k++) b += weight_bytes(&s->w[s->op_w[st->lin[k]]]);
    if (st->mlp) b += weight_bytes(&s->w[s->op_w[st[1].lin[0]]]);
    return b;
}

typedef struct prof_row {
    char label[64];
    uint32_t steps;
    double us, launches, bytes;
} prof_row;

void prof_report(const cuda_session *s) {
    const cuda_prof *p = s->prof;
    if (!p || p->tokens == 0) return;
    prof_row *rows = (prof_row *)calloc(s->n_steps + 1, sizeof *rows);
    if (!rows) return;
    uint32_t nr = 0;
    const double t = (double)p->tokens;
    for (uint32_t i = 0; i <= s->n_steps; i++) {
        char lab[64];
        if (i < s->n_steps) step_label(s, &s->steps[i], lab, sizeof lab);
        else snprintf(lab, sizeof lab, "argmax");
        uint32_t r = 0;
        while (r < nr && strcmp(rows[r].label, lab)) r++;
        if (r == nr) snprintf(rows[nr++].label, sizeof rows[0].label, "%s", lab);
        rows[r].steps++;
        rows[r].us += p->step_us[i] / t;
        rows[r].launches += (double)p->step_launches[i] / t;
        rows[r].bytes += i < s->n_steps ? (double)step_bytes(s, &s->steps[i]) : 0.0;
    }
    fprintf(stderr, "thin-run cuda profile: %u decode tokens, positions %u..%u, PDL %s\n", p->tokens,
            p->pos_first, p->pos_last, thin_cuda_pdl ? "on" : "off");
    fprintf(stderr, "%-34s %6s %8s %10s %10s %8s\n", "step (summed over layers)", "steps", "launches",
            "us/token", "MB/token", "GB/s");
    double launches = 0.0, bytes = 0.0;
    for (uint32_t r = 0; r < nr; r++) {
        const prof_row *w = &rows[r];
        fprintf(stderr, "%-34s %6u %8.0f %10.1f %10.1f %8.0f\n", w->label, w->steps, w->launches, w->us,
                w->bytes / 1e6, w->us > 0 ? w->bytes / (w->us * 1e3) : 0.0);
        launches += w->launches;
        bytes += w->bytes;
    }
    fprintf(stderr, "%-34s %6u %8.0f %10.1f %10.1f %8.0f\n", "eager total (events between steps)",
            s->n_steps + 1, launches, p->eager_us / t, bytes / 1e6, bytes / (p->eager_us / t * 1e3));
    fprintf(stderr, "%-34s %6s %8s %10.1f %10s %8.0f\n", "graph replay (device, events)", "", "",
            p->graph_us / t, "", bytes / (p->graph_us / t * 1e3));
    fprintf(stderr, "%-34s %6s %8s %10.1f\n", "forward on the host (wall)", "", "", p->wall_us / t);
    fprintf(stderr, "%-34s %6s %8s %10.1f\n", "host overhead (wall - graph)", "", "",
            (p->wall_us - p->graph_us) / t);
    fprintf(stderr, "%-34s %6s %8s %10.1f   (%u of %u tokens host-bound)\n", "eager enqueue (host)", "",
            "", p->enqueue_us / t, p->host_bound, p->tokens);
    free(rows);
}

void prof_free(cuda_session *s) {
    cuda_prof *p = s->prof;
    if (!p) return;
    for (uint32_t i = 0; p->ev && i < s->n_steps + 3; i++)
        if (p->ev[i]) cudaEventDestroy(p->ev[i]);
    if (p->g0) cudaEventDestroy(p->g0);
    if (p->g1) cudaEventDestroy(p->g1);
    free(p->ev);
    free(p->step_us);
    free(p->step_launches);
    free(p);
    s->prof = NULL;
}
