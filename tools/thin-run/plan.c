/*
 * plan.c — compiles a file's model hyperparameters and execution tape (SPEC.md §8, §10) into a
 * plan (plan.h): every op's buffers and weights resolved and checked against each other.
 *
 * The plan points into the file's mapping (weight data, tensor names), so the thin_file must stay
 * open while the plan is in use.
 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* Memory the plan owns: decompressed tensors (by tensor index), inv_freq tables, names. */
typedef struct plan_owned {
    void **data;        /* per tensor index: a decompressed copy, or NULL */
    uint64_t *reads;    /* per tensor index: bytes read per token (0 = unused) */
    uint32_t n_tensors;
    float **tables;     /* inv_freq tables */
    uint32_t n_tables;
    thin_wmat **experts;/* the mixtures' expert weights, one array per moe op */
    uint32_t n_experts;
} plan_owned;

typedef struct builder {
    plan *p;
    thin_file *f;
    plan_owned *own;
    json_t *hparams;    /* the model's hparams object */
    char *err;
    size_t errlen;
    uint32_t op;        /* index of the op being compiled, for messages */
} builder;

static thin_status fail(builder *b, thin_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static thin_status fail(builder *b, thin_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (b->errlen) vsnprintf(b->err, b->errlen, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- hyperparameters ---- */

static int hp_u32(const json_t *o, const char *key, uint32_t *out) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > UINT32_MAX)
        return -1;
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

static void hp_ids(const json_t *v, plan_hparams *hp) {
    size_t n = 0;
    if (json_is_integer(v)) {
        if (json_integer_value(v) >= 0 && json_integer_value(v) <= INT32_MAX)
            hp->eos_ids[n++] = (int32_t)json_integer_value(v);
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v) && n < 7; i++) {
            const json_t *e = json_array_get(v, i);
            if (json_is_integer(e) && json_integer_value(e) >= 0 &&
                json_integer_value(e) <= INT32_MAX)
                hp->eos_ids[n++] = (int32_t)json_integer_value(e);
        }
    }
    hp->eos_ids[n] = -1;
}

static thin_status read_hparams(builder *b) {
    plan_hparams *hp = &b->p->hp;
    const json_t *h = b->hparams;
    if (hp_u32(h, "vocab_size", &hp->vocab_size) || hp_u32(h, "hidden_size", &hp->hidden_size) ||
        hp_u32(h, "intermediate_size", &hp->intermediate_size) ||
        hp_u32(h, "n_layers", &hp->n_layers) || hp_u32(h, "n_heads", &hp->n_heads) ||
        hp_u32(h, "n_kv_heads", &hp->n_kv_heads) || hp_u32(h, "head_dim", &hp->head_dim) ||
        hp_u32(h, "max_position_embeddings", &hp->max_pos))
        return fail(b, THIN_E_BAD_MANIFEST, "model.hparams: a size is missing or not a positive "
                                            "integer");
    if (hp->n_heads % hp->n_kv_heads != 0)
        return fail(b, THIN_E_BAD_MANIFEST, "model.hparams: n_heads %u is not a multiple of "
                    "n_kv_heads %u", hp->n_heads, hp->n_kv_heads);
    const json_t *eps = json_object_get(h, "rms_norm_eps"), *th = json_object_get(h, "rope_theta");
    hp->rms_norm_eps = json_is_number(eps) ? (float)json_number_value(eps) : 1e-6f;
    hp->rope_theta = json_is_number(th) ? (float)json_number_value(th) : 10000.0f;
    const json_t *bos = json_object_get(h, "bos_token_id");
    hp->bos_id = json_is_integer(bos) && json_integer_value(bos) >= 0 &&
                         json_integer_value(bos) < hp->vocab_size
                     ? (int32_t)json_integer_value(bos)
                     : -1;
    hp_ids(json_object_get(h, "eos_token_id"), hp);
    return THIN_OK;
}

/* ---- buffers ---- */

static thin_status read_buffers(builder *b, const json_t *bufs) {
    plan *p = b->p;
    size_t n = json_object_size(bufs);
    if (!json_is_object(bufs) || n == 0 || n > 1024)
        return fail(b, THIN_E_BAD_MANIFEST, "tape: buffers is not an object of 1..1024 entries");
    p->buf_names = calloc(n, sizeof *p->buf_names);
    p->buf_sizes = calloc(n, sizeof *p->buf_sizes);
    if (!p->buf_names || !p->buf_sizes) return fail(b, THIN_E_NOMEM, "out of memory");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)bufs, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > ((json_int_t)1 << 32))
            return fail(b, THIN_E_BAD_MANIFEST, "tape: buffer '%s' has no size in 1..2^32", key);
        p->buf_names[p->n_bufs] = strdup(key);
        if (!p->buf_names[p->n_bufs]) return fail(b, THIN_E_NOMEM, "out of memory");
        p->buf_sizes[p->n_bufs++] = (uint64_t)json_integer_value(v);
    }
    p->logits_buf = plan_buf(p, "logits");
    if (p->logits_buf < 0 || p->buf_sizes[p->logits_buf] != p->hp.vocab_size)
        return fail(b, THIN_E_BAD_MANIFEST, "tape: no buffer 'logits' of vocab_size %u floats",
                    p->hp.vocab_size);
    return THIN_OK;
}

/* Buffer index of op field `key`; -1 with an error when required and missing or unknown. */
static thin_status op_buf(builder *b, const json_t *o, const char *key, int32_t *out) {
    const char *name = json_string_value(json_object_get(o, key));
    *out = name ? plan_buf(b->p, name) : -1;
    if (*out < 0)
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: field '%s' names no declared buffer",
                    b->op, key);
    return THIN_OK;
}

/* ---- weights ---- */

/* Records that the op reads `bytes` of tensor idx per token (the most any op reads counts). */
static void note_read(builder *b, uint32_t idx, uint64_t bytes) {
    if (idx < b->own->n_tensors && b->own->reads[idx] < bytes) b->own->reads[idx] = bytes;
}

/* Pointer to a tensor's bytes: in the mapping, or decompressed once into owned memory. */
static thin_status tensor_bytes(builder *b, const thin_tensor_info *ti, const void **data) {
    thin_status st = thin_file_tensor_data(b->f, ti->index, data);
    if (st != THIN_E_UNSUPPORTED) {
        if (st != THIN_OK)
            return fail(b, st, "tensor '%s': %s", ti->name, thin_file_error(b->f));
        return THIN_OK;
    }
    if (b->own->data[ti->index]) {
        *data = b->own->data[ti->index];
        return THIN_OK;
    }
    if (ti->nbytes > SIZE_MAX) return fail(b, THIN_E_LIMIT, "tensor '%s' is too large", ti->name);
    void *buf = malloc(ti->nbytes ? (size_t)ti->nbytes : 1);
    if (!buf) return fail(b, THIN_E_NOMEM, "out of memory decompressing '%s'", ti->name);
    st = thin_file_tensor_read(b->f, ti->index, buf, (size_t)ti->nbytes, 0);
    if (st != THIN_OK) {
        free(buf);
        return fail(b, st, "tensor '%s': %s", ti->name, thin_file_error(b->f));
    }
    b->own->data[ti->index] = buf;
    *data = buf;
    return THIN_OK;
}

/* Looks a tensor up by name, following tied_to to the tensor holding the data. */
static thin_status find_tensor(builder *b, const char *name, thin_tensor_info *ti,
                               thin_role *role) {
    if (thin_file_find(b->f, name, ti) != THIN_OK)
        return fail(b, THIN_E_NOT_FOUND, "tape op %u: no tensor '%s' in the file", b->op, name);
    *role = ti->role;
    for (int hops = 0; ti->tied_to; hops++) {
        const char *to = ti->tied_to;
        if (hops == 4 || thin_file_find(b->f, to, ti) != THIN_OK)
            return fail(b, THIN_E_NOT_FOUND, "tensor '%s' is tied to '%s', which is missing",
                        name, to);
    }
    return THIN_OK;
}

/* The F32 per-row scale of an F8_E4M3 matrix of `rows` rows. */
static thin_status find_scale(builder *b, const thin_tensor_info *ti, uint64_t rows,
                              const float **scale) {
    thin_tensor_info si;
    thin_role role;
    if (!ti->scale)
        return fail(b, THIN_E_BAD_MANIFEST, "tensor '%s' is F8_E4M3 without a scale", ti->name);
    thin_status st = find_tensor(b, ti->scale, &si, &role);
    if (st != THIN_OK) return st;
    if (si.dtype != THIN_DTYPE_F32 || si.rank != 1 || si.shape[0] != rows)
        return fail(b, THIN_E_SHAPE, "scale '%s' of '%s' is not F32 [%llu]", si.name, ti->name,
                    (unsigned long long)rows);
    note_read(b, si.index, si.nbytes);
    return tensor_bytes(b, &si, (const void **)scale);
}

/* The weight `name` bound as op_weight_view says into *w (its role in *role, its name in *wname);
 * it counts as read per token in full, or a row of it (embed), or top_k / n_experts of it (share:
 * an expert's weight, read by the tokens that pick that expert). */
static thin_status bind_weight(builder *b, const char *name, uint64_t rows, uint64_t cols,
                               const thin_role *allowed, const uint64_t *view, int embed,
                               const uint32_t *share, thin_wmat *w, thin_role *role, const char **wname) {
    thin_tensor_info ti;
    thin_status st = find_tensor(b, name, &ti, role);
    if (st != THIN_OK) return st;
    *wname = ti.name;
    int ok = 0;
    for (const thin_role *r = allowed; *r != THIN_ROLE_COUNT_; r++) ok |= *r == *role;
    if (!ok)
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: tensor '%s' has role %s, unfit for the op",
                    b->op, name, thin_role_name(*role));
    int is_vec = rows == 0;
    const uint64_t lead = thin_tensor_rows(&ti); /* a view's rows: a stack's counted together */
    if (view && (ti.rank < 2 || lead < view[1] || ti.shape[ti.rank - 1] != cols))
        return fail(b, THIN_E_SHAPE, "tape op %u: tensor '%s' has no rows %llu..%llu of %llu columns",
                    b->op, name, (unsigned long long)view[0], (unsigned long long)view[1],
                    (unsigned long long)cols);
    if (!view && (is_vec ? (ti.rank != 1 || ti.shape[0] != cols)
                         : (ti.rank != 2 || ti.shape[0] != rows || ti.shape[1] != cols)))
        return fail(b, THIN_E_SHAPE, "tape op %u: tensor '%s' should be [%s%llu] for its buffers",
                    b->op, name, is_vec ? "" : "rows, ", (unsigned long long)cols);
    *w = (thin_wmat){NULL, ti.dtype, NULL, is_vec ? 1 : rows, cols};
    if (ti.dtype != THIN_DTYPE_F32 && ti.dtype != THIN_DTYPE_F16 && ti.dtype != THIN_DTYPE_BF16 &&
        !(ti.dtype == THIN_DTYPE_F8_E4M3 && !is_vec))
        return fail(b, THIN_E_DTYPE, "tensor '%s': dtype %s is not supported here", name,
                    thin_dtype_name(ti.dtype));
    const uint64_t all_rows = view ? lead : rows;
    if (ti.dtype == THIN_DTYPE_F8_E4M3 &&
        (st = find_scale(b, &ti, all_rows, &w->scale)) != THIN_OK)
        return st;
    note_read(b, ti.index, embed ? ti.nbytes / rows : share ? ti.nbytes * share[0] / share[1] : ti.nbytes);
    if ((st = tensor_bytes(b, &ti, &w->data)) != THIN_OK || !view) return st;
    w->data = (const uint8_t *)w->data + view[0] * cols * thin_dtype_size(ti.dtype);
    if (w->scale) w->scale += view[0];
    return THIN_OK;
}

/* Resolves field "w" of op o to a matrix of `rows` × `cols` (rank 1 when rows == 0) and checks its
 * role against the allowed list (terminated by THIN_ROLE_COUNT_). view: NULL, or rows [view[0],
 * view[1]) of a larger matrix (one part of a fused weight), which then has at least view[1] rows
 * of `cols`. */
static thin_status op_weight_view(builder *b, const json_t *o, plan_op *op, uint64_t rows,
                                  uint64_t cols, const thin_role *allowed, const uint64_t *view) {
    const char *name = json_string_value(json_object_get(o, "w"));
    if (!name) return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: no weight name 'w'", b->op);
    return bind_weight(b, name, rows, cols, allowed, view, op->kind == PLAN_EMBED, NULL, &op->w,
                       &op->w_role, &op->w_name);
}

static thin_status op_weight(builder *b, const json_t *o, plan_op *op, uint64_t rows,
                             uint64_t cols, const thin_role *allowed) {
    return op_weight_view(b, o, op, rows, cols, allowed, NULL);
}

/* ---- ops ---- */

static const thin_role roles_norm[] = {THIN_ROLE_ATTN_NORM, THIN_ROLE_FFN_NORM, THIN_ROLE_ATTN_POST_NORM,
                                       THIN_ROLE_FFN_POST_NORM, THIN_ROLE_Q_NORM, THIN_ROLE_K_NORM,
                                       THIN_ROLE_FINAL_NORM, THIN_ROLE_OTHER, THIN_ROLE_COUNT_};
static const thin_role roles_head_norm[] = {THIN_ROLE_Q_NORM, THIN_ROLE_K_NORM, THIN_ROLE_OTHER,
                                            THIN_ROLE_COUNT_};
static const thin_role roles_embed[] = {THIN_ROLE_EMBEDDING, THIN_ROLE_COUNT_};
static const thin_role roles_bias[] = {THIN_ROLE_Q_BIAS, THIN_ROLE_K_BIAS, THIN_ROLE_V_BIAS,
                                       THIN_ROLE_OTHER, THIN_ROLE_COUNT_};
static const thin_role roles_linear[] = {
    THIN_ROLE_Q,    THIN_ROLE_K,       THIN_ROLE_V,       THIN_ROLE_O,       THIN_ROLE_QKV,
    THIN_ROLE_GATE, THIN_ROLE_UP,      THIN_ROLE_GATE_UP, THIN_ROLE_DOWN,    THIN_ROLE_LM_HEAD,
    THIN_ROLE_EMBEDDING, THIN_ROLE_OTHER, THIN_ROLE_COUNT_};

static float op_float(const json_t *o, const char *key, float def) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? (float)json_number_value(v) : def;
}

static thin_status op_u32(builder *b, const json_t *o, const char *key, uint32_t *out) {
    if (hp_u32(o, key, out))
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: '%s' is not a positive integer", b->op,
                    key);
    return THIN_OK;
}

/* Buffers in and out, which must have the same size. */
static thin_status same_size(builder *b, const plan_op *op) {
    if (b->p->buf_sizes[op->in] != b->p->buf_sizes[op->out])
        return fail(b, THIN_E_SHAPE, "tape op %u: buffers %s and %s differ in size", b->op,
                    b->p->buf_names[op->in], b->p->buf_names[op->out]);
    return THIN_OK;
}

/* A table of rot_dim/2 floats owned by the plan, in *t. */
static thin_status new_table(builder *b, const plan_op *op, float **t) {
    *t = malloc((op->rot_dim / 2) * sizeof **t);
    float **tabs = realloc(b->own->tables, (b->own->n_tables + 1) * sizeof *tabs);
    if (!*t || !tabs) {
        free(*t);
        if (tabs) b->own->tables = tabs;
        return fail(b, THIN_E_NOMEM, "out of memory");
    }
    b->own->tables = tabs;
    tabs[b->own->n_tables++] = *t;
    return THIN_OK;
}

/* A positive finite number of a rope_scaling object, or def when the key is absent or null. */
static thin_status scaling_num(builder *b, const json_t *sc, const char *key, double def,
                               double *out) {
    const json_t *v = json_object_get(sc, key);
    *out = def;
    if (!v || json_is_null(v)) return THIN_OK;
    double d = json_number_value(v);
    if (!json_is_number(v) || !(d > 0) || !isfinite(d))
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: rope_scaling '%s' is not a positive number",
                    b->op, key);
    *out = d;
    return THIN_OK;
}

/* LongRoPE (Phi-3's "longrope", earlier "su"), as transformers computes it: inv_freq[i] =
 * 1 / (ext[i] * theta^(2i/rot_dim)) with ext the short_factor list for contexts up to
 * original_max_position_embeddings and the long_factor list above, and cos and sin scaled by the
 * attention factor (given, or sqrt(1 + ln(factor) / ln(original)), factor defaulting to
 * max_position_embeddings / original). Both tables are kept; plan_set_ctx picks one. */
static thin_status longrope_tables(builder *b, const json_t *sc, plan_op *op) {
    thin_status st;
    double orig, factor, attn;
    if ((st = scaling_num(b, sc, "original_max_position_embeddings", 0, &orig))) return st;
    if (!(orig >= 1) || orig > UINT32_MAX)
        return fail(b, THIN_E_BAD_MANIFEST,
                    "tape op %u: longrope scaling without original_max_position_embeddings", b->op);
    if ((st = scaling_num(b, sc, "factor", (double)b->p->hp.max_pos / orig, &factor)) ||
        (st = scaling_num(b, sc, "attention_factor",
                          factor <= 1 ? 1.0 : sqrt(1 + log(factor) / log(orig)), &attn)))
        return st;
    uint32_t half = op->rot_dim / 2;
    static const char *const keys[2] = {"short_factor", "long_factor"};
    float *t[2];
    for (int k = 0; k < 2; k++) {
        const json_t *ext = json_object_get(sc, keys[k]);
        if (!json_is_array(ext) || json_array_size(ext) != half)
            return fail(b, THIN_E_BAD_MANIFEST,
                        "tape op %u: longrope %s is not a list of rot_dim/2 = %u numbers", b->op,
                        keys[k], half);
        if ((st = new_table(b, op, &t[k]))) return st;
        for (uint32_t i = 0; i < half; i++) {
            const json_t *e = json_array_get(ext, i);
            double f = json_number_value(e);
            if (!json_is_number(e) || !(f > 0) || !isfinite(f))
                return fail(b, THIN_E_BAD_MANIFEST,
                            "tape op %u: longrope %s[%u] is not a positive number", b->op, keys[k], i);
            t[k][i] = (float)(1.0 / (f * pow((double)op->theta, 2.0 * i / (double)op->rot_dim)));
        }
        op->longrope[k] = t[k];
    }
    op->longrope_ctx = (uint32_t)orig;
    op->rope_scale = (float)attn;
    op->inv_freq = b->p->hp.max_pos > op->longrope_ctx ? t[1] : t[0];
    return THIN_OK;
}

/* YaRN, as transformers computes it: rot_dim/2 frequencies blended between theta^(-2i/rot_dim)
 * (extrapolation, the fast-rotating dims) and the same divided by factor (interpolation, the
 * slow ones) by a ramp over the dims whose rotations in original_max_position_embeddings (the
 * object's, else the model's max_position_embeddings) lie between beta_fast (32) and beta_slow
 * (1), its ends rounded outwards unless "truncate" is false; cos and sin scaled by the attention
 * factor: given, else 0.1 ln(factor) + 1, or with "mscale" and "mscale_all_dim" the ratio of
 * 0.1 m ln(factor) + 1 for the two (1 where factor <= 1). */
static thin_status yarn_table(builder *b, const json_t *sc, plan_op *op) {
    thin_status st;
    double factor, orig, fast, slow, ms, msa, attn;
    if ((st = scaling_num(b, sc, "factor", 0, &factor))) return st;
    if (!(factor > 0))
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: yarn scaling without a factor", b->op);
    if ((st = scaling_num(b, sc, "original_max_position_embeddings", (double)b->p->hp.max_pos, &orig)) ||
        (st = scaling_num(b, sc, "beta_fast", 32, &fast)) || (st = scaling_num(b, sc, "beta_slow", 1, &slow)) ||
        (st = scaling_num(b, sc, "mscale", 0, &ms)) || (st = scaling_num(b, sc, "mscale_all_dim", 0, &msa)))
        return st;
    const double mf = factor <= 1 ? 1.0 : 0.1 * (ms > 0 && msa > 0 ? ms : 1.0) * log(factor) + 1.0;
    const double mfa = factor <= 1 ? 1.0 : 0.1 * msa * log(factor) + 1.0;
    if ((st = scaling_num(b, sc, "attention_factor", ms > 0 && msa > 0 ? mf / mfa : mf, &attn))) return st;
    const json_t *tr = json_object_get(sc, "truncate");
    if (tr && !json_is_null(tr) && !json_is_boolean(tr))
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: rope_scaling 'truncate' is not a boolean", b->op);
    const double rd = op->rot_dim, base = op->theta;
    /* the dim whose wavelength fits `rot` times into the original context */
    double lo = rd * log(orig / (fast * 2 * M_PI)) / (2 * log(base));
    double hi = rd * log(orig / (slow * 2 * M_PI)) / (2 * log(base));
    if (!json_is_false(tr)) lo = floor(lo), hi = ceil(hi);
    lo = lo > 0 ? lo : 0;
    hi = hi < rd - 1 ? hi : rd - 1;
    if (lo == hi) hi += 0.001;
    float *t;
    if ((st = new_table(b, op, &t))) return st;
    for (uint32_t i = 0; i < op->rot_dim / 2; i++) {
        double ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        const double f = pow(base, -2.0 * i / rd); /* extrapolation; interpolation is f / factor */
        t[i] = (float)(f / factor * ramp + f * (1 - ramp));
    }
    op->inv_freq = t;
    op->rope_scale = (float)attn;
    const double reach = floor(factor * orig); /* the context YaRN extends to */
    if (reach > b->p->ctx_limit) b->p->ctx_limit = reach < UINT32_MAX ? (uint32_t)reach : UINT32_MAX;
    return THIN_OK;
}

/* inv_freq for a rope_scaling object ("linear", "llama3", "longrope" or "yarn"); NULL table for
 * none, "default" and "dynamic" (dynamic NTK changes the frequencies only past
 * max_position_embeddings, which a context never exceeds). */
static thin_status rope_table(builder *b, const json_t *sc, plan_op *op) {
    const char *type = json_string_value(json_object_get(sc, "rope_type"));
    if (!type) type = json_string_value(json_object_get(sc, "type"));
    if (!json_is_object(sc) || (type && (strcmp(type, "default") == 0 || strcmp(type, "dynamic") == 0)))
        return THIN_OK;
    if (type && (strcmp(type, "longrope") == 0 || strcmp(type, "su") == 0))
        return longrope_tables(b, sc, op);
    if (type && strcmp(type, "yarn") == 0) return yarn_table(b, sc, op);
    int llama3 = type && strcmp(type, "llama3") == 0;
    if (!type || (!llama3 && strcmp(type, "linear") != 0))
        return fail(b, THIN_E_UNSUPPORTED, "rope_scaling type '%s' is not supported",
                    type ? type : "?");
    double factor = op_float(sc, "factor", 1.0f), lo = op_float(sc, "low_freq_factor", 1.0f);
    double hi = op_float(sc, "high_freq_factor", 4.0f);
    double old = op_float(sc, "original_max_position_embeddings", 8192.0f);
    float *t;
    thin_status st = new_table(b, op, &t);
    if (st) return st;
    for (uint32_t i = 0; i < op->rot_dim / 2; i++) {
        double f = pow((double)op->theta, -2.0 * i / (double)op->rot_dim);
        double wl = 2.0 * M_PI / f;
        if (!llama3 || wl > old / lo) f /= factor;
        else if (wl >= old / hi) {
            double s = (old / wl - lo) / (hi - lo);
            f = (1.0 - s) * f / factor + s * f;
        }
        t[i] = (float)f;
    }
    op->inv_freq = t;
    return THIN_OK;
}

/* Optional positive finite number `key` of op o into *out (left 0 when absent or null). */
static thin_status op_positive(builder *b, const json_t *o, const char *key, float *out) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return THIN_OK;
    const double d = json_number_value(v);
    if (!json_is_number(v) || !(d > 0) || !isfinite(d) || d > 3e38)
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: %s is not a positive number", b->op, key);
    *out = (float)d;
    return THIN_OK;
}

/* A norm's optional "offset" (finite; the weights count from it, as Gemma's 1 + w). */
static thin_status norm_offset(builder *b, const json_t *o, plan_op *op) {
    const json_t *v = json_object_get(o, "offset");
    if (!v || json_is_null(v)) return THIN_OK;
    const double d = json_number_value(v);
    if (!json_is_number(v) || !isfinite(d) || fabs(d) > 1e6)
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: offset is not a finite number", b->op);
    op->norm_offset = (float)d;
    return THIN_OK;
}

static thin_status compile_rope(builder *b, const json_t *o, plan_op *op) {
    thin_status st;
    if ((st = op_buf(b, o, "in", &op->in)) || (st = op_u32(b, o, "head_dim", &op->head_dim)))
        return st;
    uint64_t n = b->p->buf_sizes[op->in];
    if (op->head_dim % 2 || n % op->head_dim)
        return fail(b, THIN_E_SHAPE, "tape op %u: rope head_dim %u does not divide buffer %s",
                    b->op, op->head_dim, b->p->buf_names[op->in]);
    op->n_heads = (uint32_t)(n / op->head_dim);
    op->rot_dim = op->head_dim;
    if (json_object_get(o, "rot_dim") && (st = op_u32(b, o, "rot_dim", &op->rot_dim))) return st;
    if (op->rot_dim % 2 || op->rot_dim > op->head_dim)
        return fail(b, THIN_E_SHAPE, "tape op %u: rope rot_dim %u is odd or exceeds head_dim %u",
                    b->op, op->rot_dim, op->head_dim);
    op->theta = op_float(o, "theta", b->p->hp.rope_theta);
    op->rope_scale = 1.0f;
    const json_t *sc = json_object_get(o, "scaling");
    if (!sc) sc = json_object_get(b->hparams, "rope_scaling");
    return rope_table(b, sc, op);
}

static thin_status compile_attention(builder *b, const json_t *o, plan_op *op) {
    thin_status st;
    if ((st = op_buf(b, o, "q", &op->q)) || (st = op_buf(b, o, "k", &op->k)) ||
        (st = op_buf(b, o, "v", &op->v)) || (st = op_buf(b, o, "out", &op->out)) ||
        (st = op_u32(b, o, "n_heads", &op->n_heads)) ||
        (st = op_u32(b, o, "n_kv_heads", &op->n_kv_heads)) ||
        (st = op_u32(b, o, "head_dim", &op->head_dim)))
        return st;
    const uint64_t *sz = b->p->buf_sizes;
    uint64_t qd = (uint64_t)op->n_heads * op->head_dim, kd = (uint64_t)op->n_kv_heads * op->head_dim;
    if (op->n_heads % op->n_kv_heads || sz[op->q] != qd || sz[op->out] != qd || sz[op->k] != kd ||
        sz[op->v] != kd)
        return fail(b, THIN_E_SHAPE, "tape op %u: attention heads do not match its buffers", b->op);
    if (op->layer < 0 || (uint32_t)op->layer >= b->p->hp.n_layers)
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: attention layer %d out of range", b->op,
                    op->layer);
    if ((st = op_positive(b, o, "scale", &op->attn_scale)) || (st = op_positive(b, o, "softcap", &op->softcap)))
        return st;
    const json_t *w = json_object_get(o, "window");
    if (w && !json_is_null(w)) {
        if (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > UINT32_MAX)
            return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: attention window is not a positive integer",
                        b->op);
        op->window = (uint32_t)json_integer_value(w);
    }
    return THIN_OK;
}

static thin_status compile_weighted(builder *b, const json_t *o, plan_op *op) {
    thin_status st;
    const uint64_t *sz = b->p->buf_sizes;
    switch (op->kind) {
    case PLAN_EMBED:
        if ((st = op_buf(b, o, "out", &op->out)) || (st = op_positive(b, o, "scale", &op->embed_scale)))
            return st;
        return op_weight(b, o, op, b->p->hp.vocab_size, sz[op->out], roles_embed);
    case PLAN_RMSNORM:
        if ((st = op_buf(b, o, "in", &op->in)) || (st = op_buf(b, o, "out", &op->out)) ||
            (st = same_size(b, op)) || (st = norm_offset(b, o, op)))
            return st;
        op->eps = op_float(o, "eps", b->p->hp.rms_norm_eps);
        return op_weight(b, o, op, 0, sz[op->in], roles_norm);
    case PLAN_HEAD_RMSNORM:
        if ((st = op_buf(b, o, "in", &op->in)) || (st = op_u32(b, o, "head_dim", &op->head_dim)) ||
            (st = norm_offset(b, o, op)))
            return st;
        if (sz[op->in] % op->head_dim)
            return fail(b, THIN_E_SHAPE, "tape op %u: head_dim does not divide %s", b->op,
                        b->p->buf_names[op->in]);
        op->n_heads = (uint32_t)(sz[op->in] / op->head_dim);
        op->eps = op_float(o, "eps", b->p->hp.rms_norm_eps);
        return op_weight(b, o, op, 0, op->head_dim, roles_head_norm);
    case PLAN_BIAS:
        if ((st = op_buf(b, o, "out", &op->out))) return st;
        return op_weight(b, o, op, 0, sz[op->out], roles_bias);
    default: { /* PLAN_LINEAR */
        if ((st = op_buf(b, o, "in", &op->in)) || (st = op_buf(b, o, "out", &op->out))) return st;
        const json_t *sj = json_object_get(o, "split");
        const char *split = json_string_value(sj);
        op->split = !split ? PLAN_SPLIT_NONE
                    : strcmp(split, "row") == 0 ? PLAN_SPLIT_ROW
                    : strcmp(split, "col") == 0 ? PLAN_SPLIT_COL : PLAN_SPLIT_NONE;
        if ((sj && !json_is_null(sj) && !split) || (split && op->split == PLAN_SPLIT_NONE))
            return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: split is neither \"col\" nor \"row\"",
                        b->op);
        if (op->in == op->out)
            return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: linear reads and writes one buffer",
                        b->op);
        const json_t *rj = json_object_get(o, "rows");
        if (!rj || json_is_null(rj))
            return op_weight(b, o, op, sz[op->out], sz[op->in], roles_linear);
        const json_t *r0 = json_array_get(rj, 0), *r1 = json_array_get(rj, 1);
        if (json_array_size(rj) != 2 || !json_is_integer(r0) || !json_is_integer(r1) ||
            json_integer_value(r0) < 0 || json_integer_value(r1) <= json_integer_value(r0) ||
            (uint64_t)(json_integer_value(r1) - json_integer_value(r0)) != sz[op->out])
            return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: rows is not [first, end) of %s's size",
                        b->op, b->p->buf_names[op->out]);
        const uint64_t view[2] = {(uint64_t)json_integer_value(r0), (uint64_t)json_integer_value(r1)};
        return op_weight_view(b, o, op, sz[op->out], sz[op->in], roles_linear, view);
    }
    }
}

static const thin_role roles_router[] = {THIN_ROLE_ROUTER, THIN_ROLE_OTHER, THIN_ROLE_COUNT_};
static const thin_role roles_expert[3][4] = {{THIN_ROLE_GATE, THIN_ROLE_GATE_UP, THIN_ROLE_OTHER, THIN_ROLE_COUNT_},
                                             {THIN_ROLE_UP, THIN_ROLE_GATE_UP, THIN_ROLE_OTHER, THIN_ROLE_COUNT_},
                                             {THIN_ROLE_DOWN, THIN_ROLE_OTHER, THIN_ROLE_COUNT_}};

/* An expert's weight in a moe op's list: a name, or [name, first, end] (rows [first, end) of a
 * stacked tensor seen as a matrix): its name, and *is_view with view set for the second form. */
static thin_status expert_ref(builder *b, const json_t *v, const char **name, uint64_t view[2], int *is_view) {
    const json_t *r0 = json_array_get(v, 1), *r1 = json_array_get(v, 2);
    *is_view = json_is_array(v);
    *name = json_string_value(*is_view ? json_array_get(v, 0) : v);
    if (!*name || (*is_view && (json_array_size(v) != 3 || !json_is_integer(r0) || !json_is_integer(r1) ||
                                json_integer_value(r0) < 0 || json_integer_value(r1) <= json_integer_value(r0))))
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: an expert's weight is neither a name nor [name, first, end]",
                    b->op);
    view[0] = (uint64_t)json_integer_value(r0), view[1] = (uint64_t)json_integer_value(r1);
    return THIN_OK;
}

/* The rows of an expert's weight v (its inner size, for a gate): the view's rows, or the named
 * matrix's. */
static thin_status expert_rows(builder *b, const json_t *v, uint32_t *rows) {
    const char *name;
    uint64_t view[2], n = 0;
    int is_view;
    thin_tensor_info ti;
    thin_role role;
    thin_status st = expert_ref(b, v, &name, view, &is_view);
    if (st) return st;
    if (is_view)
        n = view[1] - view[0];
    else if ((st = find_tensor(b, name, &ti, &role)))
        return st;
    else if (ti.rank == 2)
        n = ti.shape[0];
    if (n == 0 || n > UINT32_MAX)
        return fail(b, THIN_E_SHAPE, "tape op %u: expert weight '%s' is not a matrix", b->op, name);
    *rows = (uint32_t)n;
    return THIN_OK;
}

/* Binds an expert's weight v (expert_ref's forms); rows and cols as bind_weight takes them. */
static thin_status expert_weight(builder *b, const json_t *v, uint64_t rows, uint64_t cols, const thin_role *allowed,
                                 const uint32_t *share, thin_wmat *w) {
    const char *name, *wn;
    uint64_t view[2];
    int is_view;
    thin_role role;
    thin_status st = expert_ref(b, v, &name, view, &is_view);
    if (st) return st;
    if (is_view && rows && view[1] - view[0] != rows)
        return fail(b, THIN_E_SHAPE, "tape op %u: expert rows %llu..%llu of '%s' are not %llu rows", b->op,
                    (unsigned long long)view[0], (unsigned long long)view[1], name, (unsigned long long)rows);
    return bind_weight(b, name, rows, cols, allowed, is_view ? view : NULL, 0, share, w, &role, &wn);
}

/* A mixture of experts: in and out of one size, the router [experts, in] and for each expert its
 * weight in "gate", "up" ([I, in]) and "down" ([out, I]), each a name or rows of a stacked tensor
 * (expert_weight), I taken from the first gate; top_k of the experts a token; norm_topk (a
 * boolean, default false). */
static thin_status compile_moe(builder *b, const json_t *o, plan_op *op) {
    thin_status st;
    static const char *const keys[3] = {"gate", "up", "down"};
    const json_t *lists[3];
    if ((st = op_buf(b, o, "in", &op->in)) || (st = op_buf(b, o, "out", &op->out)) ||
        (st = same_size(b, op)) || (st = op_u32(b, o, "top_k", &op->top_k)))
        return st;
    if (op->layer < 0) return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: moe without a layer", b->op);
    for (int j = 0; j < 3; j++) {
        lists[j] = json_object_get(o, keys[j]);
        if (!json_is_array(lists[j]) || json_array_size(lists[j]) == 0 || json_array_size(lists[j]) > 65536 ||
            json_array_size(lists[j]) != json_array_size(lists[0]))
            return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: moe '%s' is not a list of one name per expert",
                        b->op, keys[j]);
    }
    op->n_experts = (uint32_t)json_array_size(lists[0]);
    if (op->top_k > op->n_experts)
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: moe top_k %u exceeds its %u experts", b->op,
                    op->top_k, op->n_experts);
    const json_t *nt = json_object_get(o, "norm_topk");
    if (nt && !json_is_boolean(nt) && !json_is_null(nt))
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: moe norm_topk is not a boolean", b->op);
    op->norm_topk = json_is_true(nt);
    const uint64_t d = b->p->buf_sizes[op->in];
    const char *router = json_string_value(json_object_get(o, "router"));
    if (!router) return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: moe without a router", b->op);
    if ((st = bind_weight(b, router, op->n_experts, d, roles_router, NULL, 0, NULL, &op->w, &op->w_role,
                          &op->w_name)))
        return st;
    thin_role role;
    if ((st = expert_rows(b, json_array_get(lists[0], 0), &op->moe_inter))) return st;
    thin_wmat *ex = calloc((size_t)op->n_experts * 3, sizeof *ex);
    thin_wmat **all = realloc(b->own->experts, (b->own->n_experts + 1) * sizeof *all);
    if (!ex || !all) {
        free(ex);
        if (all) b->own->experts = all;
        return fail(b, THIN_E_NOMEM, "out of memory");
    }
    b->own->experts = all;
    all[b->own->n_experts++] = ex;
    op->experts = ex;
    const json_t *sh = json_object_get(o, "shared"), *sg = json_object_get(o, "shared_gate");
    if (sh && !json_is_null(sh)) { /* a shared expert: [gate, up, down], its gate optional */
        const char *wn;
        if (json_array_size(sh) != 3)
            return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: moe shared is not [gate, up, down]", b->op);
        if ((st = expert_rows(b, json_array_get(sh, 0), &op->shared_inter))) return st;
        for (int j = 0; j < 3; j++)
            if ((st = expert_weight(b, json_array_get(sh, j), j == 2 ? d : op->shared_inter,
                                    j == 2 ? op->shared_inter : d, roles_expert[j], NULL, &op->shared[j])))
                return st;
        if (sg && !json_is_null(sg) &&
            (st = bind_weight(b, json_string_value(sg) ? json_string_value(sg) : "", 1, d, roles_router, NULL, 0,
                              NULL, &op->shared_gate, &role, &wn)))
            return st;
    } else if (sg && !json_is_null(sg)) {
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: moe shared_gate without a shared expert", b->op);
    }
    /* DeepSeek-V3's routing (GLM-4.5's): sigmoid scores, a bias for the choice, groups, a scale */
    const char *scoring = json_string_value(json_object_get(o, "scoring"));
    const json_t *sb = json_object_get(o, "score_bias");
    if (json_object_get(o, "scoring") && (!scoring || (strcmp(scoring, "softmax") && strcmp(scoring, "sigmoid"))))
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: moe scoring is neither \"softmax\" nor \"sigmoid\"", b->op);
    op->moe_sigmoid = scoring && strcmp(scoring, "sigmoid") == 0;
    op->n_group = op->topk_group = 1;
    if ((json_object_get(o, "n_group") && (st = op_u32(b, o, "n_group", &op->n_group))) ||
        (json_object_get(o, "topk_group") && (st = op_u32(b, o, "topk_group", &op->topk_group))) ||
        (st = op_positive(b, o, "routed_scale", &op->routed_scale)))
        return st;
    if (op->n_group > 256 || op->n_experts % op->n_group || op->topk_group > op->n_group ||
        (uint64_t)op->topk_group * (op->n_experts / op->n_group) < op->top_k ||
        (op->n_group > 1 && op->n_experts / op->n_group < 2))
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: moe groups (%u, %u chosen) do not fit %u experts and top_k %u",
                    b->op, op->n_group, op->topk_group, op->n_experts, op->top_k);
    if (sb && !json_is_null(sb)) {
        const char *wn;
        if ((st = bind_weight(b, json_string_value(sb) ? json_string_value(sb) : "", 0, op->n_experts, roles_router,
                              NULL, 0, NULL, &op->score_bias, &role, &wn)))
            return st;
    }
    const uint32_t share[2] = {op->top_k, op->n_experts};
    for (uint32_t e = 0; e < op->n_experts; e++)
        for (int j = 0; j < 3; j++)
            if ((st = expert_weight(b, json_array_get(lists[j], e), j == 2 ? d : op->moe_inter,
                                    j == 2 ? op->moe_inter : d, roles_expert[j], share, &ex[3 * e + j])))
                return st;
    return THIN_OK;
}

static const struct {
    const char *name;
    plan_op_kind kind;
} op_names[] = {{"embed", PLAN_EMBED},       {"rmsnorm", PLAN_RMSNORM}, {"linear", PLAN_LINEAR},
                {"head_rmsnorm", PLAN_HEAD_RMSNORM}, {"rope", PLAN_ROPE},
                {"attention", PLAN_ATTENTION}, {"add", PLAN_ADD},     {"silu_mul", PLAN_SILU_MUL},
                {"bias", PLAN_BIAS},           {"gelu_tanh_mul", PLAN_GELU_TANH_MUL},
                {"softcap", PLAN_SOFTCAP},     {"scale", PLAN_SCALE},     {"moe", PLAN_MOE}};

static thin_status compile_op(builder *b, const json_t *o, plan_op *op) {
    const char *name = json_string_value(json_object_get(o, "op"));
    *op = (plan_op){.layer = -1, .in = -1, .out = -1, .q = -1, .k = -1, .v = -1};
    for (size_t i = 0; name && i < sizeof op_names / sizeof op_names[0]; i++)
        if (strcmp(name, op_names[i].name) == 0) op->kind = op_names[i].kind;
    if (!op->kind)
        return fail(b, THIN_E_UNSUPPORTED, "tape op %u: unknown op '%s'", b->op,
                    name ? name : "(none)");
    const json_t *layer = json_object_get(o, "layer");
    if (json_is_integer(layer) && json_integer_value(layer) >= -1 &&
        json_integer_value(layer) < (json_int_t)b->p->hp.n_layers)
        op->layer = (int32_t)json_integer_value(layer);
    else if (layer && !json_is_null(layer))
        return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: bad layer", b->op);
    thin_status st;
    switch (op->kind) {
    case PLAN_ROPE: return compile_rope(b, o, op);
    case PLAN_ATTENTION: return compile_attention(b, o, op);
    case PLAN_MOE: return compile_moe(b, o, op);
    case PLAN_SOFTCAP:
        if ((st = op_buf(b, o, "in", &op->in)) || (st = op_positive(b, o, "cap", &op->softcap))) return st;
        if (!(op->softcap > 0))
            return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: softcap without a cap", b->op);
        return THIN_OK;
    case PLAN_SCALE:
        if ((st = op_buf(b, o, "in", &op->in)) || (st = op_positive(b, o, "factor", &op->factor))) return st;
        if (!(op->factor > 0))
            return fail(b, THIN_E_BAD_MANIFEST, "tape op %u: scale without a factor", b->op);
        return THIN_OK;
    case PLAN_ADD:
        if ((st = op_positive(b, o, "scale", &op->factor))) return st;
        /* fall through */
    case PLAN_SILU_MUL:
    case PLAN_GELU_TANH_MUL:
        if ((st = op_buf(b, o, "in", &op->in)) || (st = op_buf(b, o, "out", &op->out))) return st;
        return same_size(b, op);
    default: return compile_weighted(b, o, op);
    }
}

/* Each layer's attention must appear exactly once: it owns that layer's KV cache. */
static thin_status check_layers(builder *b) {
    plan *p = b->p;
    uint32_t *seen = calloc(p->hp.n_layers, sizeof *seen);
    if (!seen) return fail(b, THIN_E_NOMEM, "out of memory");
    for (uint32_t i = 0; i < p->n_ops; i++)
        if (p->ops[i].kind == PLAN_ATTENTION) seen[p->ops[i].layer]++;
    thin_status st = THIN_OK;
    for (uint32_t l = 0; l < p->hp.n_layers && st == THIN_OK; l++)
        if (seen[l] != 1)
            st = fail(b, THIN_E_BAD_MANIFEST, "tape: layer %u has %u attention ops (want 1)", l,
                      seen[l]);
    free(seen);
    return st;
}

static thin_status compile_tape(builder *b, const json_t *tape) {
    plan *p = b->p;
    const json_t *ver = json_object_get(tape, "version"), *ops = json_object_get(tape, "ops");
    if (!json_is_integer(ver) || json_integer_value(ver) != 1)
        return fail(b, THIN_E_UNSUPPORTED, "tape: version is not 1");
    thin_status st = read_buffers(b, json_object_get(tape, "buffers"));
    if (st != THIN_OK) return st;
    if (!json_is_array(ops) || json_array_size(ops) == 0 || json_array_size(ops) > (1u << 20))
        return fail(b, THIN_E_BAD_MANIFEST, "tape: ops is not a non-empty array");
    p->ops = calloc(json_array_size(ops), sizeof *p->ops);
    if (!p->ops) return fail(b, THIN_E_NOMEM, "out of memory");
    for (b->op = 0; b->op < json_array_size(ops); b->op++) {
        if ((st = compile_op(b, json_array_get(ops, b->op), &p->ops[b->op])) != THIN_OK) return st;
        p->n_ops++;
    }
    return check_layers(b);
}

/* ---- build / free ---- */

static thin_status pick_kv_dtype(builder *b, thin_dtype want) {
    if (want == THIN_DTYPE_INVALID) {
        want = THIN_DTYPE_BF16;
        const char *rt;
        json_t *r;
        if (thin_file_section(b->f, "runtime", &rt) == THIN_OK && (r = json_loads(rt, 0, NULL))) {
            const char *name = json_string_value(json_object_get(r, "kv_cache_dtype"));
            if (name) want = thin_dtype_from_name(name);
            json_decref(r);
        }
    }
    if (want != THIN_DTYPE_BF16 && want != THIN_DTYPE_F32)
        return fail(b, THIN_E_DTYPE, "KV cache dtype %s is not supported (BF16 or F32)",
                    thin_dtype_name(want));
    b->p->kv_dtype = want;
    return THIN_OK;
}

/* Section `key` as a JSON object. A missing tape is reported with why_no_tape, the reason
 * thin-pack recorded when it wrote none (the model section's no_tape), where there is one. */
static json_t *load_section(builder *b, const char *key, const char *why_no_tape, thin_status *st) {
    const char *text;
    json_error_t e;
    *st = thin_file_section(b->f, key, &text);
    if (*st != THIN_OK && why_no_tape)
        fail(b, *st, "%s%s", strncmp(why_no_tape, "no execution tape", 17) ? "no execution tape: " : "",
             why_no_tape);
    else if (*st != THIN_OK)
        fail(b, *st, "the file has no '%s' section%s", key,
             strcmp(key, "tape") == 0 ? " (no execution tape: architecture not supported)" : "");
    if (*st != THIN_OK) return NULL;
    json_t *j = json_loads(text, 0, &e);
    if (!json_is_object(j)) {
        json_decref(j);
        *st = fail(b, THIN_E_BAD_MANIFEST, "section '%s' is not a JSON object", key);
        return NULL;
    }
    return j;
}

static thin_status build(builder *b) {
    thin_status st;
    json_t *model = load_section(b, "model", NULL, &st);
    if (!model) return st;
    /* a file thin-pack wrote without a tape says why before anything else */
    const char *why = json_string_value(json_object_get(model, "no_tape"));
    json_t *tape = why ? load_section(b, "tape", why, &st) : NULL;
    if (why && !tape) {
        json_decref(model);
        return st;
    }
    b->hparams = json_object_get(model, "hparams");
    st = json_is_object(b->hparams) ? read_hparams(b)
                                    : fail(b, THIN_E_BAD_MANIFEST, "model: no hparams object");
    if (st == THIN_OK && !tape) tape = load_section(b, "tape", NULL, &st);
    if (tape && st == THIN_OK) st = compile_tape(b, tape);
    json_decref(tape);
    json_decref(model);
    b->hparams = NULL;
    if (st != THIN_OK) return st;
    for (uint32_t i = 0; i < b->own->n_tensors; i++) b->p->weight_bytes += b->own->reads[i];
    return THIN_OK;
}

thin_status plan_build(plan *p, thin_file *f, thin_dtype kv_dtype, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    if (errlen) err[0] = '\0';
    plan_owned *own = calloc(1, sizeof *own);
    builder b = {p, f, own, NULL, err, errlen, 0};
    if (!own) return fail(&b, THIN_E_NOMEM, "out of memory");
    p->owned_ = own;
    own->n_tensors = thin_file_tensor_count(f);
    own->data = calloc(own->n_tensors + 1, sizeof *own->data);
    own->reads = calloc(own->n_tensors + 1, sizeof *own->reads);
    thin_status st = !own->data || !own->reads ? fail(&b, THIN_E_NOMEM, "out of memory")
                                               : pick_kv_dtype(&b, kv_dtype);
    if (st == THIN_OK) st = build(&b);
    if (st != THIN_OK) plan_free(p);
    else p->shards = 1;
    return st;
}

void plan_set_ctx(plan *p, uint32_t ctx) {
    if (!ctx) ctx = p->hp.max_pos;
    for (uint32_t i = 0; i < p->n_ops; i++) {
        plan_op *op = &p->ops[i];
        if (op->kind == PLAN_ROPE && op->longrope[0])
            op->inv_freq = op->longrope[ctx > op->longrope_ctx];
    }
}

uint32_t plan_default_ctx(const plan *p) {
    uint32_t ctx = p->hp.max_pos;
    for (uint32_t i = 0; i < p->n_ops; i++) {
        const plan_op *op = &p->ops[i];
        if (op->kind == PLAN_ROPE && op->longrope[0] && op->longrope_ctx < ctx) ctx = op->longrope_ctx;
    }
    return ctx;
}

void plan_free(plan *p) {
    if (!p) return;
    plan_owned *own = p->owned_;
    if (own) {
        for (uint32_t i = 0; own->data && i < own->n_tensors; i++) free(own->data[i]);
        for (uint32_t i = 0; i < own->n_tables; i++) free(own->tables[i]);
        for (uint32_t i = 0; i < own->n_experts; i++) free(own->experts[i]);
        free(own->experts);
        free(own->data);
        free(own->reads);
        free(own->tables);
        free(own);
    }
    for (uint32_t i = 0; p->buf_names && i < p->n_bufs; i++) free(p->buf_names[i]);
    free(p->buf_names);
    free(p->buf_sizes);
    free(p->ops);
    memset(p, 0, sizeof *p);
}

int32_t plan_buf(const plan *p, const char *name) {
    for (uint32_t i = 0; i < p->n_bufs; i++)
        if (strcmp(p->buf_names[i], name) == 0) return (int32_t)i;
    return -1;
}

/* ---- split over devices (tensor parallel) ---- */

static const char *op_label(plan_op_kind k) {
    for (size_t i = 0; i < sizeof op_names / sizeof op_names[0]; i++)
        if (op_names[i].kind == k) return op_names[i].name;
    return "?";
}

/* Whole heads on every device: the heads divide over the devices, or (fewer heads than devices,
 * as K/V heads can be) the devices divide over the heads, each head then held by devices / heads
 * of them. */
static int heads_fit(uint64_t heads, uint32_t devices) {
    return heads && (heads % devices == 0 || devices % heads == 0);
}

thin_status plan_check_split(const plan *p, uint32_t n, char *err, size_t errlen) {
    if (n == 0) {
        snprintf(err, errlen, "cannot split over 0 devices");
        return THIN_E_INVALID_ARG;
    }
    if (n == 1) return THIN_OK;
    /* each buffer is whole on every device (0) or divided over them (1: n equal slices of rows,
     * whole heads, a KV head on several devices where there are fewer KV heads than devices) */
    uint8_t *div = calloc(p->n_bufs ? p->n_bufs : 1, 1);
    if (!div) {
        snprintf(err, errlen, "out of memory");
        return THIN_E_NOMEM;
    }
    const uint64_t *sz = p->buf_sizes;
    const char *why = NULL;
    char num[160];
    uint32_t i = 0;
    for (; i < p->n_ops && !why; i++) {
        const plan_op *o = &p->ops[i];
        switch (o->kind) {
        case PLAN_EMBED: div[o->out] = 0; break;
        case PLAN_RMSNORM:
            if (div[o->in]) why = "its input is divided over the devices (a norm needs it whole)";
            else div[o->out] = 0;
            break;
        case PLAN_LINEAR:
            if (o->split == PLAN_SPLIT_ROW) {
                if (!div[o->in]) why = "a row split's input is whole (it must be divided)";
                else if (o->w.cols % n) {
                    snprintf(num, sizeof num, "its columns (%llu) do not divide over the devices",
                             (unsigned long long)o->w.cols);
                    why = num;
                } else {
                    div[o->out] = 0; /* after the all-reduce */
                }
            } else {
                if (div[o->in]) why = "its input is divided over the devices (only a row split takes that)";
                else if (o->split == PLAN_SPLIT_COL && o->w.rows % n) {
                    snprintf(num, sizeof num, "its rows (%llu) do not divide over the devices",
                             (unsigned long long)o->w.rows);
                    why = num;
                } else {
                    div[o->out] = o->split == PLAN_SPLIT_COL;
                }
            }
            break;
        case PLAN_HEAD_RMSNORM:
        case PLAN_ROPE:
            if (div[o->in] && !(o->head_dim && sz[o->in] % o->head_dim == 0 &&
                                heads_fit(sz[o->in] / o->head_dim, n))) {
                snprintf(num, sizeof num, "its heads (%llu) and the devices do not divide",
                         (unsigned long long)(o->head_dim ? sz[o->in] / o->head_dim : 0));
                why = num;
            }
            break;
        case PLAN_ATTENTION:
            if (div[o->q] != div[o->k] || div[o->q] != div[o->v])
                why = "q, k and v are not all divided over the devices";
            else if (div[o->q] && (o->n_heads % n || !heads_fit(o->n_kv_heads, n))) {
                snprintf(num, sizeof num, "its query heads (%u) do not divide over the devices, or "
                         "its KV heads (%u) and the devices do not divide", o->n_heads, o->n_kv_heads);
                why = num;
            } else {
                div[o->out] = div[o->q];
            }
            break;
        case PLAN_ADD:
        case PLAN_SILU_MUL:
        case PLAN_GELU_TANH_MUL:
            if (div[o->in] != div[o->out]) why = "one operand is divided over the devices, the other whole";
            break;
        case PLAN_BIAS: break; /* elementwise: a divided buffer takes its slice of the bias */
        case PLAN_SOFTCAP:
        case PLAN_SCALE: break; /* elementwise, in place */
        case PLAN_MOE: /* every expert's inner dims divide over the devices; an all-reduce of out */
            if (div[o->in]) why = "its input is divided over the devices (a mixture needs it whole)";
            else if (o->moe_inter % n || o->shared_inter % n) {
                snprintf(num, sizeof num, "its experts' inner size (%u, shared %u) does not divide over the devices",
                         o->moe_inter, o->shared_inter);
                why = num;
            } else {
                div[o->out] = 0;
            }
            break;
        }
    }
    free(div);
    if (!why) return THIN_OK; /* divided logits (a split LM head) are gathered at the end */
    const plan_op *o = &p->ops[i - 1];
    char layer[32] = "";
    if (o->layer >= 0) snprintf(layer, sizeof layer, ", layer %d", o->layer);
    snprintf(err, errlen, "cannot split over %u devices: tape op %u (%s%s%s%s): %s", n, i - 1,
             op_label(o->kind), o->w_name ? " " : "", o->w_name ? o->w_name : "", layer, why);
    return THIN_E_UNSUPPORTED;
}
