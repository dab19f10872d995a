/*
 * make-random-init.c — writes a random SmolLM3-shaped model initialised as transformers does
 * (every Linear and the embedding normal(0, 0.02), RMSNorm weights 1, tied embeddings, the
 * padding row of the embedding zero), as BF16 SafeTensors plus config.json. C11 and libc only.
 *
 *   cc -O2 -o make-random-init bench/make-random-init.c -lm
 *   make-random-init OUTDIR [--layers N] [--hidden N] [--intermediate N] [--heads N]
 *                    [--kv-heads N] [--vocab N] [--seed S] [--std X]
 *                    [--perturb EPS [--perturb-roles LIST] [--perturb-seed S]]
 *
 * Defaults are SmolLM3-3B's (36 layers, hidden 2048, intermediate 11008, 16 heads, 4 KV heads,
 * vocab 128256). The values come from a fixed generator (splitmix64-seeded xoshiro256**, one
 * stream per tensor and per 1 Mi-element piece, Box-Muller in double precision), so a model is
 * the same for the same seed on any machine, and a model with fewer layers has the same first
 * layers; they are not torch's values.
 *
 * --perturb EPS writes the chosen tensors as F32 values w * (1 + EPS * z), w being the BF16 weight
 * the unperturbed model holds and z an independent standard normal: a known relative weight error
 * of RMS EPS. The relative RMS actually applied is printed. --perturb-roles chooses them: a comma
 * list of roles (q k v o gate up down), each with an optional layer range, e.g. "gate,up,down:9-26"
 * (the quality profile's FP8 set for 36 layers); default gate,up,down in every layer.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { PIECE = 1 << 20, MAX_TENSORS = 4096 };

typedef struct spec {
    int layers, hidden, inter, heads, kv_heads, vocab;
    uint64_t seed, pseed;
    double std, eps;
    int play0[16], play1[16]; /* perturbed layers [play0, play1] per role; play0 > play1: none */
} spec;

enum { R_EMB, R_ATTN_NORM, R_Q, R_K, R_V, R_O, R_FFN_NORM, R_GATE, R_UP, R_DOWN, R_NORM, R_COUNT };
static const char *const role_names[R_COUNT] = {
    "embedding", "attn_norm", "q", "k", "v", "o", "ffn_norm", "gate", "up", "down", "norm"};

typedef struct tensor {
    char name[96];
    int role, layer;
    uint64_t rows, cols;   /* cols = 0: 1-D of rows elements */
    int f32;               /* perturbed: stored F32 */
    uint64_t off, nbytes;
} tensor;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct rng { uint64_t s[4]; } rng;

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

static void rng_seed(rng *r, uint64_t seed, uint64_t idx, uint64_t piece)
{
    uint64_t x = seed ^ (idx * 0x632be59bd9b4e019ull) ^ (piece * 0x85157af5ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

/* n standard normals (Box-Muller, both outputs used). */
static void normals(rng *r, double *out, size_t n)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((rng_next(r) >> 11) + 1) * 0x1p-53, u2 = (rng_next(r) >> 11) * 0x1p-53;
        double m = sqrt(-2 * log(u1)), a = 6.283185307179586 * u2;
        out[i] = m * cos(a);
        if (i + 1 < n)
            out[i + 1] = m * sin(a);
    }
}

static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float f32_of_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int add(tensor *t, int *n, int role, int layer, uint64_t rows, uint64_t cols,
               const spec *s)
{
    tensor *x = &t[(*n)++];
    static const char *const hf[R_COUNT] = {
        "embed_tokens", "input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
        "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj",
        "mlp.up_proj", "mlp.down_proj", "norm"};
    if (layer >= 0)
        snprintf(x->name, sizeof x->name, "model.layers.%d.%s.weight", layer, hf[role]);
    else
        snprintf(x->name, sizeof x->name, "model.%s.weight", hf[role]);
    x->role = role, x->layer = layer, x->rows = rows, x->cols = cols;
    x->f32 = s->eps > 0 && cols && layer >= s->play0[role] && layer <= s->play1[role];
    x->nbytes = rows * (cols ? cols : 1) * (x->f32 ? 4 : 2);
    return 0;
}

static int list(tensor *t, const spec *s)
{
    int n = 0, d = s->hidden, hd = s->hidden / s->heads, q = s->heads * hd, kv = s->kv_heads * hd;
    add(t, &n, R_EMB, -1, (uint64_t)s->vocab, (uint64_t)d, s);
    for (int l = 0; l < s->layers; l++) {
        add(t, &n, R_ATTN_NORM, l, (uint64_t)d, 0, s);
        add(t, &n, R_Q, l, (uint64_t)q, (uint64_t)d, s);
        add(t, &n, R_K, l, (uint64_t)kv, (uint64_t)d, s);
        add(t, &n, R_V, l, (uint64_t)kv, (uint64_t)d, s);
        add(t, &n, R_O, l, (uint64_t)d, (uint64_t)q, s);
        add(t, &n, R_FFN_NORM, l, (uint64_t)d, 0, s);
        add(t, &n, R_GATE, l, (uint64_t)s->inter, (uint64_t)d, s);
        add(t, &n, R_UP, l, (uint64_t)s->inter, (uint64_t)d, s);
        add(t, &n, R_DOWN, l, (uint64_t)d, (uint64_t)s->inter, s);
    }
    add(t, &n, R_NORM, -1, (uint64_t)d, 0, s);
    uint64_t off = 0;
    for (int i = 0; i < n; i++)
        t[i].off = off, off += t[i].nbytes;
    return n;
}

/* Writes tensor i's data; adds its perturbation's squared sums to *e2 and *w2. */
static int write_tensor(FILE *f, const tensor *t, int i, const spec *s, double *e2, double *w2)
{
    uint64_t n = t->rows * (t->cols ? t->cols : 1);
    double *z = malloc(PIECE * sizeof *z), *p = malloc(PIECE * sizeof *p);
    uint16_t *h = malloc(PIECE * sizeof *h);
    float *g = malloc(PIECE * sizeof *g);
    if (!z || !p || !h || !g)
        return fprintf(stderr, "make-random-init: out of memory\n"), -1;
    int rc = 0;
    for (uint64_t k = 0; k * PIECE < n && !rc; k++) {
        size_t m = n - k * PIECE < PIECE ? (size_t)(n - k * PIECE) : PIECE;
        rng r;
        if (!t->cols) {
            for (size_t j = 0; j < m; j++)
                h[j] = bf16_of(1.0f);
        } else {
            rng_seed(&r, s->seed, (uint64_t)i, k);
            normals(&r, z, m);
            for (size_t j = 0; j < m; j++)
                h[j] = bf16_of((float)(z[j] * s->std));
            if (t->role == R_EMB && s->vocab > 128004) { /* padding_idx 128004 */
                uint64_t lo = (uint64_t)128004 * t->cols, hi = lo + t->cols;
                for (size_t j = 0; j < m; j++)
                    if (k * PIECE + j >= lo && k * PIECE + j < hi)
                        h[j] = 0;
            }
        }
        if (t->f32) {
            rng_seed(&r, s->pseed ^ 0x5bd1e995ull, (uint64_t)i, k);
            normals(&r, p, m);
            for (size_t j = 0; j < m; j++) {
                double w = f32_of_bf16(h[j]);
                g[j] = (float)(w * (1 + s->eps * p[j]));
                *e2 += ((double)g[j] - w) * ((double)g[j] - w);
                *w2 += w * w;
            }
            rc = fwrite(g, 4, m, f) != m;
        } else {
            rc = fwrite(h, 2, m, f) != m;
        }
    }
    free(z), free(p), free(h), free(g);
    return rc ? (fprintf(stderr, "make-random-init: write error\n"), -1) : 0;
}

static int write_config(const char *dir, const spec *s)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return fprintf(stderr, "make-random-init: %s: %s\n", path, strerror(errno)), -1;
    fprintf(f, "{\n  \"architectures\": [\"SmolLM3ForCausalLM\"],\n  \"model_type\": \"smollm3\",\n"
               "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
               "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
               "  \"num_key_value_heads\": %d,\n  \"vocab_size\": %d,\n"
               "  \"max_position_embeddings\": 32768,\n  \"rms_norm_eps\": 1e-06,\n"
               "  \"rope_theta\": 2000000.0,\n  \"rope_scaling\": null,\n"
               "  \"hidden_act\": \"silu\",\n  \"tie_word_embeddings\": true,\n"
               "  \"no_rope_layer_interval\": 4,\n  \"initializer_range\": %g,\n"
               "  \"bos_token_id\": 128000,\n  \"eos_token_id\": 128001,\n"
               "  \"pad_token_id\": 128004,\n  \"torch_dtype\": \"bfloat16\"\n}\n",
            s->hidden, s->inter, s->layers, s->heads, s->kv_heads, s->vocab, s->std);
    return fclose(f) ? -1 : 0;
}

/* "gate,up,down:9-26" into per-role layer ranges. Returns 0, or -1 on a bad list. */
static int parse_roles(spec *s, const char *arg)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", arg);
    for (int r = 0; r < R_COUNT; r++)
        s->play0[r] = 1, s->play1[r] = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *colon = strchr(tok, ':');
        int r, a = 0, b = 1 << 30;
        if (colon) {
            *colon = 0;
            if (sscanf(colon + 1, "%d-%d", &a, &b) != 2 && sscanf(colon + 1, "%d", &a) == 1)
                b = a;
        }
        for (r = 0; r < R_COUNT && strcmp(tok, role_names[r]); r++)
            ;
        if (r == R_COUNT || r == R_EMB || r == R_NORM || a > b)
            return -1;
        s->play0[r] = a, s->play1[r] = b;
    }
    return 0;
}

int main(int argc, char **argv)
{
    spec s = {36, 2048, 11008, 16, 4, 128256, 0, 1, 0.02, 0, {0}, {0}};
    parse_roles(&s, "gate,up,down");
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *ip = !strcmp(a, "--layers") ? &s.layers : !strcmp(a, "--hidden") ? &s.hidden
                : !strcmp(a, "--intermediate") ? &s.inter : !strcmp(a, "--heads") ? &s.heads
                : !strcmp(a, "--kv-heads") ? &s.kv_heads : !strcmp(a, "--vocab") ? &s.vocab : NULL;
        if (a[0] != '-') {
            dir = a;
            continue;
        }
        if (!v)
            return fprintf(stderr, "make-random-init: %s needs a value\n", a), 2;
        i++;
        if (ip)
            *ip = atoi(v);
        else if (!strcmp(a, "--seed"))
            s.seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--perturb-seed"))
            s.pseed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--std"))
            s.std = atof(v);
        else if (!strcmp(a, "--perturb"))
            s.eps = atof(v);
        else if (!strcmp(a, "--perturb-roles") && parse_roles(&s, v))
            return fprintf(stderr, "make-random-init: --perturb-roles: bad list '%s'\n", v), 2;
        else if (strcmp(a, "--perturb-roles"))
            return fprintf(stderr, "make-random-init: unknown option %s\n", a), 2;
    }
    if (!dir || s.layers < 1 || s.hidden < 1 || s.heads < 1 || s.kv_heads < 1 || s.vocab < 1 ||
        s.inter < 1 || s.hidden % s.heads || s.heads % s.kv_heads || s.layers > 1000)
        return fprintf(stderr, "usage: make-random-init OUTDIR [options] (see the source)\n"), 2;
    if (mkdir(dir, 0777) && errno != EEXIST)
        return fprintf(stderr, "make-random-init: %s: %s\n", dir, strerror(errno)), 1;
    static tensor t[MAX_TENSORS];
    int n = list(t, &s);
    /* header: JSON with data offsets, padded with spaces to a multiple of 8 */
    size_t cap = (size_t)n * 200 + 64, len = 0;
    char *hdr = malloc(cap);
    if (!hdr)
        return 1;
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(hdr + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%llu",
                                t[i].name, t[i].f32 ? "F32" : "BF16",
                                (unsigned long long)t[i].rows);
        if (t[i].cols)
            len += (size_t)snprintf(hdr + len, cap - len, ",%llu", (unsigned long long)t[i].cols);
        len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%llu,%llu]}",
                                (unsigned long long)t[i].off,
                                (unsigned long long)(t[i].off + t[i].nbytes));
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8)
        hdr[len++] = ' ';
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        return fprintf(stderr, "make-random-init: %s: %s\n", path, strerror(errno)), 1;
    uint64_t hl = len;
    unsigned char le[8];
    for (int k = 0; k < 8; k++)
        le[k] = (unsigned char)(hl >> (8 * k));
    double e2 = 0, w2 = 0;
    int rc = fwrite(le, 1, 8, f) != 8 || fwrite(hdr, 1, len, f) != len;
    for (int i = 0; i < n && !rc; i++)
        rc = write_tensor(f, &t[i], i, &s, &e2, &w2);
    rc |= fclose(f) != 0;
    free(hdr);
    if (rc || write_config(dir, &s))
        return fprintf(stderr, "make-random-init: %s: write failed\n", path), 1;
    printf("%s: %d layers, %llu bytes", dir, s.layers,
           (unsigned long long)(8 + len + t[n - 1].off + t[n - 1].nbytes));
    if (s.eps > 0)
        printf(", perturbation relative RMS %.6f", w2 > 0 ? sqrt(e2 / w2) : 0.0);
    printf("\n");
    return 0;
}
