/*
 * thin-run — runs a .thin model's execution tape: generates text from a prompt, or scores an id
 * sequence (teacher-forced logits for every position).
 *
 * Sections: options, model loading, prompt and ids, output of text, generation, scoring, main.
 *
 * --json prints one object on stdout after the run instead of streaming text; its fields are only
 * ever added, never renamed: model, digest, device, threads, kv_dtype, weight_bytes, load_s,
 * prompt_tokens, prefill_s, prefill_tok_s, generated_tokens, decode_s, decode_tok_s, ttft_s,
 * stop ("eos", "bos", "stop_string", "max_tokens", "context"), ids (generated), text, shards, ctx
 * (the positions the session holds: --ctx, its default, or as many as fit on the GPU), prepared
 * (the backend ran the prompt's one-time work, its kernels' first loads and its batch size's GEMM
 * algorithms, during the load while the checksums were checked, so prefill_s leaves it out),
 * start_to_first_s (seconds from the start of main to the first generated token chosen: argument
 * parsing, the load with its checksums and uploads, the prompt and the first choice; 0 when none).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "chat.h"
#include "cli.h"
#include "plan.h"
#include "run_util.h"
#include "sampler.h"
#include "thin.h"
#include "tokenizer.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "thin-run writes logits as little-endian floats and assumes a little-endian host"
#endif

#define MAX_STOPS 16
/* The fewest positions a defaulted context shrinks to where the GPU cannot hold the default. */
#define CTX_LEAST 256

typedef struct options {
    const char *model, *prompt, *ids, *ids_file, *score, *out, *dump_logits, *system;
    const char *stops[MAX_STOPS];
    int n_stops;
    long long max_tokens;   /* -1 = up to the context limit */
    long long ctx;          /* 0 = the model's limit */
    double temperature, top_p;
    long long top_k, threads, shards;
    uint64_t seed;
    int have_seed, chat, no_bos, echo, json, verify, quiet, ignore_eos;
    thin_dtype kv_dtype;    /* INVALID = the file's runtime default */
    const char *device;     /* NULL = auto */
} options;

static void usage(void) {
    printf(
        "Usage: %s MODEL.thin [options]      (MODEL '-' reads the file from stdin)\n"
        "Generates text with the model's execution tape, or scores an id sequence.\n\n"
        "Prompt:\n"
        "  -p, --prompt TEXT     prompt text (BOS is prepended unless --no-bos)\n"
        "  --ids \"1 403 407\"     prompt as token ids, used as given\n"
        "  --ids-file F          prompt ids from a file of whitespace-separated ids ('-' stdin)\n"
        "  --chat                wrap the prompt in the model's chat template\n"
        "  --system TEXT         system message for --chat\n"
        "  --no-bos              do not prepend BOS to a text prompt\n"
        "  --echo                print the prompt's text before the generation\n"
        "Generation:\n"
        "  -n, --max-tokens N    tokens to generate (default: up to the context limit)\n"
        "  -t, --temperature T   0 = greedy (default 0.8)\n"
        "  --top-k K             keep the K most likely tokens (0 = off, default)\n"
        "  --top-p P             nucleus sampling mass (default 0.95; 1 = off)\n"
        "  --seed S              sampler seed (default: from the clock)\n"
        "  --stop STR            stop when the text contains STR (repeatable)\n"
        "  --ctx N               context length (default: the model's limit; for a LongRoPE\n"
        "                        model its original context, whose short factors it then takes;\n"
        "                        a longer --ctx takes the long factors; on a GPU whose free\n"
        "                        memory cannot hold the default's KV cache, as many positions\n"
        "                        as it holds, with a note)\n"
        "Measurement:\n"
        "  --score FILE          teacher-forced: run the ids in FILE ('-' stdin) and write the\n"
        "                        logits of every position as raw F32 rows to --out\n"
        "  --out FILE            output of --score ('-' = stdout, the default; never a terminal)\n"
        "  --dump-logits FILE    write the logits of each generated step as raw F32 rows\n"
        "  --json                print a JSON summary on stdout instead of streaming the text\n"
        "Runtime:\n"
        "  --device cpu|cuda     default: cuda when built with CUDA and a GPU is present, unless the\n"
        "                        model needs an op the CUDA kernels lack (then cpu, with a warning)\n"
        "  --threads N           CPU threads (default: all cores)\n"
        "  --shards N            run on the CPU as a tensor-parallel split over N devices would:\n"
        "                        checks the split, sums o and down from N partial products\n"
        "  --kv-dtype bf16|f32   KV cache type (default: the file's runtime setting, else bf16)\n"
        "  --verify / --no-verify  check every chunk checksum on load (default: verify)\n"
        "  -q, --quiet           no warnings or notes\n"
        "  -h, --help            this help;  --version  the version\n"
        "Exit status: 0 ok, 1 bad model or data (or a failed run), 2 usage error.\n",
        cli_prog());
}

enum {
    O_IDS = 256, O_IDS_FILE, O_IGNORE_EOS, O_CHAT, O_SYSTEM, O_NO_BOS, O_ECHO, O_TOPK, O_TOPP, O_SEED, O_STOP,
    O_CTX, O_SCORE, O_OUT, O_DUMP, O_JSON, O_DEVICE, O_THREADS, O_KV, O_VERIFY, O_NO_VERIFY,
    O_VERSION, O_SHARDS
};

static const struct option long_opts[] = {
    {"prompt", 1, 0, 'p'},      {"ids", 1, 0, O_IDS},           {"ids-file", 1, 0, O_IDS_FILE},
    {"chat", 0, 0, O_CHAT},     {"system", 1, 0, O_SYSTEM},     {"no-bos", 0, 0, O_NO_BOS},
    {"echo", 0, 0, O_ECHO},     {"ignore-eos", 0, 0, O_IGNORE_EOS},     {"max-tokens", 1, 0, 'n'},      {"temperature", 1, 0, 't'},
    {"top-k", 1, 0, O_TOPK},    {"top-p", 1, 0, O_TOPP},        {"seed", 1, 0, O_SEED},
    {"stop", 1, 0, O_STOP},     {"ctx", 1, 0, O_CTX},           {"score", 1, 0, O_SCORE},
    {"out", 1, 0, O_OUT},       {"dump-logits", 1, 0, O_DUMP},  {"json", 0, 0, O_JSON},
    {"device", 1, 0, O_DEVICE}, {"threads", 1, 0, O_THREADS},   {"kv-dtype", 1, 0, O_KV},
    {"verify", 0, 0, O_VERIFY}, {"no-verify", 0, 0, O_NO_VERIFY}, {"quiet", 0, 0, 'q'},
    {"help", 0, 0, 'h'},        {"version", 0, 0, O_VERSION},   {"shards", 1, 0, O_SHARDS},
    {0, 0, 0, 0}};

static int parse_number_opt(int c, const char *arg, options *o) {
    long long v;
    double d;
    switch (c) {
    case 'n':
        if (cli_parse_int(arg, 0, 1ll << 31, &v)) return cli_usage_error("bad --max-tokens");
        o->max_tokens = v;
        return 0;
    case 't':
        if (cli_parse_float(arg, &d) || d < 0 || d > 100) return cli_usage_error("bad --temperature");
        o->temperature = d;
        return 0;
    case O_TOPK:
        if (cli_parse_int(arg, 0, 1ll << 31, &o->top_k)) return cli_usage_error("bad --top-k");
        return 0;
    case O_TOPP:
        if (cli_parse_float(arg, &d) || !(d > 0 && d <= 1)) return cli_usage_error("bad --top-p");
        o->top_p = d;
        return 0;
    case O_SEED:
        if (cli_parse_int(arg, 0, INT64_MAX, &v)) return cli_usage_error("bad --seed");
        o->seed = (uint64_t)v;
        o->have_seed = 1;
        return 0;
    case O_CTX:
        if (cli_parse_int(arg, 1, UINT32_MAX, &o->ctx)) return cli_usage_error("bad --ctx");
        return 0;
    case O_SHARDS:
        if (cli_parse_int(arg, 1, 1024, &o->shards)) return cli_usage_error("bad --shards");
        return 0;
    default: /* O_THREADS */
        if (cli_parse_int(arg, 1, 1024, &o->threads)) return cli_usage_error("bad --threads");
        return 0;
    }
}

static int parse_opt(int c, const char *arg, options *o) {
    switch (c) {
    case 'p': o->prompt = arg; return 0;
    case O_IDS: o->ids = arg; return 0;
    case O_IDS_FILE: o->ids_file = arg; return 0;
    case O_CHAT: o->chat = 1; return 0;
    case O_SYSTEM: o->system = arg; return 0;
    case O_NO_BOS: o->no_bos = 1; return 0;
    case O_ECHO: o->echo = 1; return 0;
    case O_IGNORE_EOS: o->ignore_eos = 1; return 0;
    case O_STOP:
        if (o->n_stops == MAX_STOPS || !arg[0]) return cli_usage_error("bad or too many --stop");
        o->stops[o->n_stops++] = arg;
        return 0;
    case O_SCORE: o->score = arg; return 0;
    case O_OUT: o->out = arg; return 0;
    case O_DUMP: o->dump_logits = arg; return 0;
    case O_JSON: o->json = 1; return 0;
    case O_DEVICE:
        if (strcmp(arg, "cpu") && strcmp(arg, "cuda")) return cli_usage_error("--device cpu|cuda");
        o->device = arg;
        return 0;
    case O_KV:
        o->kv_dtype = strcasecmp(arg, "bf16") == 0  ? THIN_DTYPE_BF16
                      : strcasecmp(arg, "f32") == 0 ? THIN_DTYPE_F32 : THIN_DTYPE_INVALID;
        return o->kv_dtype ? 0 : cli_usage_error("--kv-dtype bf16|f32");
    case O_VERIFY: o->verify = 1; return 0;
    case O_NO_VERIFY: o->verify = 0; return 0;
    case 'q': o->quiet = 1; cli_set_quiet(1); return 0;
    case 'h': usage(); exit(cli_close_stdout());
    case O_VERSION: printf("%s %s\n", cli_prog(), THIN_LIB_VERSION); exit(cli_close_stdout());
    default: return parse_number_opt(c, arg, o);
    }
}

static int parse_args(int argc, char **argv, options *o) {
    *o = (options){.max_tokens = -1, .temperature = 0.8, .top_p = 0.95, .verify = 1, .shards = 1};
    int c;
    while ((c = getopt_long(argc, argv, "p:n:t:qh", long_opts, NULL)) != -1) {
        if (c == '?' || c == ':') return CLI_EXIT_USAGE;
        int rc = parse_opt(c, optarg, o);
        if (rc) return rc;
    }
    if (argc - optind != 1) return cli_usage_error("expected one model file");
    o->model = argv[optind];
    int n_prompts = !!o->prompt + !!o->ids + !!o->ids_file;
    if (n_prompts > 1) return cli_usage_error("give only one of -p, --ids, --ids-file");
    if (o->score && (n_prompts || o->chat || o->dump_logits))
        return cli_usage_error("--score takes no prompt, --chat or --dump-logits");
    if (o->out && !o->score) return cli_usage_error("--out goes with --score");
    if (o->json && o->score) return cli_usage_error("--json goes with generation, not --score");
    if (o->chat && !o->prompt) return cli_usage_error("--chat needs a text prompt (-p)");
    if (o->shards > 1 && o->device && strcmp(o->device, "cpu"))
        return cli_usage_error("--shards runs on the CPU (--device cpu)");
    if (!o->have_seed) o->seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    return 0;
}

/* ---- model loading ---- */

typedef struct run {
    const options *o;
    thin_file *f;
    plan p;
    tok *tk;                /* NULL when the file carries no tokenizer */
    const backend_ops *be;
    void *sess;
    uint32_t ctx;           /* positions available */
    int ctx_fit;            /* ctx is fewer than the default: as many as the GPU holds */
    unsigned threads;
    double load_s;
    double t_start;         /* cli_now() as main began */
    char digest[65];
    int32_t chat_stop;      /* id of the token that ends an assistant turn (--chat), or -1 */
    /* --verify: the chunk checksums, checked on threads of their own while the backend loads */
    pthread_t verify_tid;
    int verify_started;
    thin_status verify_st;
    atomic_int verify_done;
    int32_t *prompt;        /* the prompt's ids (generation), known before the backend starts */
    size_t n_prompt;
    int prepared;           /* the backend paid the prompt's one-time costs during the load */
    char prompt_err[768];   /* why the prompt could not be made */
} run;

/* For the messages about a full context: where the default shrank to what the GPU holds, that;
 * where the context was not asked for and the model allows more (a LongRoPE model's default), how
 * to get more; else "". */
static const char *ctx_hint(const run *r) {
    static char hint[96];
    if (r->ctx_fit) return " (as many positions as fit in the GPU's memory)";
    if (r->o->ctx || r->ctx >= plan_ctx_limit(&r->p)) return "";
    snprintf(hint, sizeof hint, " (the default; --ctx allows up to %u)", plan_ctx_limit(&r->p));
    return hint;
}

static int verify_progress(void *user, uint64_t done, uint64_t total) {
    (void)user;
    cli_progress("verifying", done, total);
    return 0;
}

static void *verify_main(void *arg) {
    run *r = arg;
    r->verify_st = thin_file_verify(r->f, r->threads, r->o->quiet ? NULL : verify_progress, NULL);
    atomic_store(&r->verify_done, 1);
    return NULL;
}

/* Starts the verification (--verify) beside the caller; without a thread it runs here. The file
 * is read, never changed, by both sides, and nothing runs on its weights before verify_join. */
static void verify_start(run *r) {
    if (!r->o->verify) return;
    if (pthread_create(&r->verify_tid, NULL, verify_main, r) == 0) r->verify_started = 1;
    else verify_main(r);
}

/* Waits for the verification; 0 when it passed (or is off), else prints why and returns the exit
 * code. */
static int verify_join(run *r) {
    if (!r->o->verify) return 0;
    if (r->verify_started) pthread_join(r->verify_tid, NULL);
    r->verify_started = 0;
    cli_progress_end();
    if (r->verify_st == THIN_OK) return 0;
    cli_error("%s (use --no-verify to run it anyway)", thin_file_error(r->f));
    return CLI_EXIT_DATA;
}

/* A file that opened but does not make a model: with --verify, a failing checksum is the likelier
 * cause, so the checksums are checked first and named instead. */
static int bad_model(run *r, const char *what, const char *msg) {
    if (r->o->verify) {
        verify_start(r);
        if (verify_join(r)) return CLI_EXIT_DATA;
    }
    cli_error("%s: %s%s", r->o->model, what, msg);
    return CLI_EXIT_DATA;
}

/* Opens the file and builds the plan; the checksums are left to verify_start. */
static int open_model(run *r) {
    const options *o = r->o;
    thin_status st;
    if (!(r->f = thin_file_new())) return cli_error("out of memory"), CLI_EXIT_DATA;
    st = strcmp(o->model, "-") == 0 ? thin_file_open_fd(r->f, STDIN_FILENO, "stdin", 0)
                                    : thin_file_open(r->f, o->model, 0);
    if (st != THIN_OK) return cli_error("%s", thin_file_error(r->f)), CLI_EXIT_DATA;
    thin_hex32(thin_file_digest(r->f), r->digest);
    char err[512];
    if (plan_build(&r->p, r->f, o->kv_dtype, err, sizeof err) != THIN_OK) return bad_model(r, "", err);
    if (plan_check_split(&r->p, (uint32_t)o->shards, err, sizeof err) != THIN_OK) return bad_model(r, "", err);
    r->p.shards = (uint32_t)o->shards;
    return 0;
}

/* The tokenizer the file carries: where its bytes are (found on the calling thread, the only one
 * that asks the file for them) and what building it gave (on a thread of its own). */
typedef struct tok_job {
    int format;             /* 0: none, 1: Hugging Face tokenizer.json, 2: GGUF vocabulary */
    const void *data, *cfg, *tpl; /* tpl: a chat template file's bytes, or NULL */
    size_t size, cfg_size, tpl_size;
    int tpl_json;           /* tpl is a chat_template.json object, not a template's text */
    tok *tk;
    int rc;
    char err[512];
} tok_job;

/* Finds the tokenizer's blobs, if the file carries one. */
static void tok_locate(run *r, tok_job *j) {
    const char *text, *name, *cfg_name;
    json_t *t;
    if (thin_file_section(r->f, "tokenizer", &text) != THIN_OK) return;
    if (!(t = json_loads(text, 0, NULL))) return;
    const char *format = json_string_value(json_object_get(t, "format"));
    if (format && strcmp(format, "hf") == 0 &&
        (name = json_string_value(json_object_get(t, "tokenizer_json"))) &&
        thin_file_blob(r->f, name, &j->data, &j->size) == THIN_OK) {
        j->format = 1;
        cfg_name = json_string_value(json_object_get(t, "tokenizer_config"));
        if (cfg_name && thin_file_blob(r->f, cfg_name, &j->cfg, &j->cfg_size) != THIN_OK) j->cfg = NULL;
        const char *tpl = json_string_value(json_object_get(t, "chat_template"));
        if (tpl && thin_file_blob(r->f, tpl, &j->tpl, &j->tpl_size) != THIN_OK) j->tpl = NULL;
        j->tpl_json = tpl && strlen(tpl) > 5 && strcmp(tpl + strlen(tpl) - 5, ".json") == 0;
    } else if (format && strcmp(format, "gguf") == 0 &&
               (name = json_string_value(json_object_get(t, "blob"))) &&
               thin_file_blob(r->f, name, &j->data, &j->size) == THIN_OK) {
        j->format = 2;
    } else {
        cli_warn("%s: the tokenizer section names no usable blob", r->o->model);
    }
    json_decref(t);
}

/* Builds it from the bytes alone (a thread's function); a chat template file of its own takes the
 * place of tokenizer_config.json's, as transformers takes it. */
static void *tok_build(void *arg) {
    tok_job *j = arg;
    if (j->format == 1) {
        j->rc = tok_load_hf(&j->tk, j->data, j->size, j->cfg, j->cfg ? j->cfg_size : 0, j->err, sizeof j->err);
        if (!j->rc && j->tpl)
            j->rc = tok_set_chat_template(j->tk, j->tpl, j->tpl_size, j->tpl_json, j->err, sizeof j->err);
    } else if (j->format == 2) {
        j->rc = tok_load_gguf(&j->tk, j->data, j->size, j->err, sizeof j->err);
    }
    return NULL;
}

/* Takes the built tokenizer; on failure the message goes into msg. */
static int tok_take(run *r, tok_job *j, char *msg, size_t len) {
    r->tk = j->tk;
    j->tk = NULL;
    if (j->rc) return snprintf(msg, len, "%s: tokenizer: %s", r->o->model, j->err), CLI_EXIT_DATA;
    if (r->tk && tok_vocab_size(r->tk) > r->p.hp.vocab_size)
        return snprintf(msg, len, "%s: the tokenizer has %u tokens, the model %u", r->o->model,
                        tok_vocab_size(r->tk), r->p.hp.vocab_size), CLI_EXIT_DATA;
    return 0;
}

#ifdef THIN_RUN_CUDA
static int gpu_present(void) { return cuda_backend_available(); }
#endif

/* Picks the backend (--device) and checks --ctx; these errors go out at once. */
static int pick_backend(run *r) {
    const options *o = r->o;
    r->be = &backend_cpu;
#ifdef THIN_RUN_CUDA
    int gpu = gpu_present();
    if (o->device ? strcmp(o->device, "cuda") == 0 : gpu && o->shards == 1) {
        if (!gpu) return cli_error("--device cuda: no usable GPU found"), CLI_EXIT_DATA;
        char why[256];
        if (cuda_backend_runs(&r->p, why, sizeof why)) {
            r->be = &backend_cuda;
        } else {
            if (o->device) return cli_error("%s: --device cuda: %s", o->model, why), CLI_EXIT_DATA;
            cli_warn("%s: %s; running on the CPU", o->model, why);
        }
    }
#else
    if (o->device && strcmp(o->device, "cuda") == 0)
        return cli_error("--device cuda: this build has no CUDA backend"), CLI_EXIT_DATA;
#endif
    if (o->ctx > plan_ctx_limit(&r->p))
        return cli_error("--ctx %lld exceeds the model's limit of %u positions", o->ctx,
                         plan_ctx_limit(&r->p)), CLI_EXIT_DATA;
    return 0;
}

/* Starts the backend pick_backend chose; on failure the message goes into msg (load prints it). */
static int start_backend(run *r, char *msg, size_t len) {
    const options *o = r->o;
    r->ctx = o->ctx ? (uint32_t)o->ctx : plan_default_ctx(&r->p);
    plan_set_ctx(&r->p, r->ctx);
    /* An explicit --ctx is taken as given; the default may shrink to what the device holds (the
     * default is at most a LongRoPE model's original context, so the rope table stays). */
    const uint32_t want = r->ctx, least = o->ctx ? r->ctx : r->ctx < CTX_LEAST ? r->ctx : CTX_LEAST;
    char err[512];
    if (r->be->create(&r->sess, &r->p, &r->ctx, least, r->threads, err, sizeof err))
        return snprintf(msg, len, "%s: %s backend: %s", o->model, r->be->name, err), CLI_EXIT_DATA;
    r->ctx_fit = r->ctx < want;
    if (r->ctx_fit)
        cli_warn("%s: context of %u positions, as many as fit in the GPU's memory (the default of %u "
                 "would not; --ctx sets it)", o->model, r->ctx, want);
    return 0;
}

static int prompt_ids(run *r, int32_t **ids, size_t *n);

/* Opens the model and starts the backend. Three things run side by side: the checksums
 * (--verify, threads of their own), the tokenizer's build (a thread of its own) and the backend's
 * load on the calling thread, which only reads the weights (copying them to the GPU; the CPU
 * backend uses them in place). The session runs nothing for the caller before the checksums have
 * passed. Of several failures the first of these is told: a checksum, the tokenizer, the
 * backend, the prompt. */
static int load(run *r) {
    double t0 = cli_now();
    tok_job tj = {0};
    int rc = open_model(r);
    if (!rc) tok_locate(r, &tj);
    if (!rc) rc = pick_backend(r);
    if (rc) return r->load_s = cli_now() - t0, rc;
    char msg[768], tmsg[768];
    verify_start(r);
    pthread_t tt;
    const int tok_thread = tj.format && pthread_create(&tt, NULL, tok_build, &tj) == 0;
    if (tj.format && !tok_thread) tok_build(&tj);
    rc = start_backend(r, msg, sizeof msg);
    if (tok_thread) pthread_join(tt, NULL);
    const int trc = tok_take(r, &tj, tmsg, sizeof tmsg);
    const int prc = trc || r->o->score ? 0 : prompt_ids(r, &r->prompt, &r->n_prompt);
    /* While the checksums are still being checked, the backend can pay the prompt's one-time
     * costs (its kernels' first loads, its batch size's GEMM algorithms) for nothing. */
    if (!rc && !trc && !prc && r->verify_started && !atomic_load(&r->verify_done) && r->be->prepare &&
        r->n_prompt >= 2 && r->n_prompt <= r->ctx) {
        const int pr = r->be->prepare(r->sess, (uint32_t)r->n_prompt);
        if (pr < 0)
            rc = CLI_EXIT_DATA, snprintf(msg, sizeof msg, "%s: %s backend: %s", r->o->model, r->be->name,
                                         r->be->error(r->sess));
        r->prepared = pr > 0;
    }
    int vrc = verify_join(r);
    if (!vrc && trc) vrc = trc, cli_error("%s", tmsg);
    if (!vrc && rc) vrc = rc, cli_error("%s", msg);
    if (!vrc && prc) vrc = prc, cli_error("%s", r->prompt_err);
    r->load_s = cli_now() - t0;
    return vrc;
}

static void unload(run *r) {
    if (r->sess) r->be->free(r->sess);
    free(r->prompt);
    tok_free(r->tk);
    plan_free(&r->p);
    thin_file_free(r->f);
}

/* ---- prompt ---- */

/* Renders the prompt through the model's chat template and encodes it with special tokens. */
/* A prompt that cannot be made: the message waits in r->prompt_err (load tells it unless an
 * error about the file comes first). */
static int prompt_fail(run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->prompt_err, sizeof r->prompt_err, fmt, ap);
    va_end(ap);
    return CLI_EXIT_DATA;
}

static int chat_prompt_ids(run *r, int32_t **ids, size_t *n) {
    const options *o = r->o;
    char err[512];
    if (!r->tk) return prompt_fail(r, "%s carries no tokenizer: --chat needs one", o->model);
    chat_opts co = {.format = CHAT_FORMAT_NONE, .system = o->system, .think = CHAT_THINK_DEFAULT};
    chat_from_template(tok_chat_template(r->tk), &co);
    if (co.format == CHAT_FORMAT_NONE)
        return prompt_fail(r, "%s: the tokenizer has no supported chat template", o->model);
    char *text;
    size_t len;
    if (chat_render(&co, o->prompt, &text, &len, err, sizeof err))
        return prompt_fail(r, "--chat: %s", err);
    int rc = tok_encode(r->tk, text, len, 0, 1, ids, n, err, sizeof err);
    free(text);
    if (rc) return prompt_fail(r, "prompt: %s", err);
    r->chat_stop = tok_find(r->tk, chat_stop_text(co.format));
    return 0;
}

static int prompt_ids(run *r, int32_t **ids, size_t *n) {
    const options *o = r->o;
    char err[512];
    if (o->ids || o->ids_file) {
        char *text = (char *)o->ids;
        size_t len;
        if (o->ids_file && read_whole(o->ids_file, &text, &len))
            return prompt_fail(r, "%s: cannot read: %s", o->ids_file, strerror(errno));
        int rc = ids_parse(text, r->p.hp.vocab_size, ids, n, err, sizeof err);
        if (o->ids_file) free(text);
        if (rc) return prompt_fail(r, "%s: %s", o->ids_file ? o->ids_file : "--ids", err);
        return 0;
    }
    if (o->chat) return chat_prompt_ids(r, ids, n);
    int32_t bos = r->tk && tok_bos(r->tk) >= 0 ? tok_bos(r->tk) : r->p.hp.bos_id;
    if (!o->prompt || !o->prompt[0]) { /* no prompt: BOS alone, as llama2.c does */
        if (bos < 0 || o->no_bos)
            return prompt_fail(r, "the model has no BOS token: give a prompt");
        if (!(*ids = malloc(sizeof **ids))) return prompt_fail(r, "out of memory");
        (*ids)[0] = bos;
        *n = 1;
        return 0;
    }
    if (!r->tk) return prompt_fail(r, "%s carries no tokenizer: use --ids", o->model);
    int add_bos = !o->no_bos && tok_add_bos(r->tk);
    if (tok_encode(r->tk, o->prompt, strlen(o->prompt), add_bos, 0, ids, n, err, sizeof err))
        return prompt_fail(r, "prompt: %s", err);
    if (*n == 0) return prompt_fail(r, "the prompt encodes to no tokens");
    return 0;
}

/* ---- text output ---- */

typedef struct out_text {
    int json;        /* collect into buf instead of writing to stdout */
    char *buf;
    size_t len, cap; /* (len also counts what went to stdout) */
    int failed;
} out_text;

static void text_out(void *user, const char *s, size_t n) {
    out_text *t = user;
    if (!t->json) {
        if (fwrite(s, 1, n, stdout) != n || fflush(stdout)) t->failed = 1;
        t->len += n;
        return;
    }
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *b = realloc(t->buf, cap);
        if (!b) {
            t->failed = 1;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

/* Sends the text of token id through the decoder (or its number, without a tokenizer) to the
 * stop filter. Returns 1 when a stop string completed, 0 to go on, -1 on failure. */
static int emit_token(run *r, tok_decoder *d, stop_filter *sf, int32_t id) {
    char buf[1024];
    size_t n = 0;
    if (!r->tk) n = (size_t)snprintf(buf, sizeof buf, "%d ", id);
    else if (tok_decoder_push(d, id, buf, sizeof buf, &n)) return -1;
    return stop_filter_push(sf, buf, n);
}

/* ---- generation ---- */

typedef struct gen {
    int32_t *ids;           /* generated ids */
    size_t n_ids;
    size_t n_prompt;
    size_t n_forward;       /* decode steps run */
    double prefill_s, decode_s, ttft_s;
    double first_s;         /* start of main to the first token chosen */
    const char *stop;       /* why generation ended */
    FILE *dump;             /* --dump-logits, or NULL */
    float *logits;          /* vocab floats, when the host needs them */
} gen;

static int is_stop_token(const run *r, int32_t id) {
    for (int i = 0; i < 8 && r->p.hp.eos_ids[i] >= 0; i++)
        if (id == r->p.hp.eos_ids[i]) return 1;
    if (r->tk && tok_eos(r->tk) == id) return 1;
    return r->chat_stop >= 0 && id == r->chat_stop;
}

static int is_bos(const run *r, int32_t id) {
    int32_t bos = r->tk && tok_bos(r->tk) >= 0 ? tok_bos(r->tk) : r->p.hp.bos_id;
    return bos >= 0 && id == bos;
}

/* Runs the prompt; leaves the logits of its last position in g->logits, or on the backend (with
 * the argmax in *next). */
static int prefill(run *r, const int32_t *prompt, size_t n, gen *g, int32_t *next) {
    double t0 = cli_now();
    if (n > 1 && r->be->prefill) {
        if (r->be->prefill(r->sess, prompt, (uint32_t)n, 0, g->logits, next)) return -1;
    } else {
        if (n > 1 && r->be->forward(r->sess, prompt, (uint32_t)n - 1, 0, NULL, NULL)) return -1;
        if (r->be->forward(r->sess, prompt + n - 1, 1, (uint32_t)n - 1, g->logits, next)) return -1;
    }
    g->prefill_s = cli_now() - t0;
    return 0;
}

/* Chooses the token after the current logits, writing them to --dump-logits. */
static int choose(run *r, sampler *s, gen *g, int32_t argmax, int32_t *next) {
    uint32_t vocab = r->p.hp.vocab_size;
    if (g->dump && fwrite(g->logits, sizeof(float), vocab, g->dump) != vocab) {
        cli_error("%s: write failed", r->o->dump_logits);
        return -1;
    }
    if (s->temperature == 0.0f) {
        *next = argmax;
    } else if (!g->logits) { /* the backend samples where the logits are */
        if (r->be->sample(r->sess, s->temperature, s->top_k, s->top_p, sampler_coin(s), next)) {
            cli_error("%s: %s: sampling failed: %s", r->o->model, r->be->name, r->be->error(r->sess));
            return -1;
        }
    } else if ((*next = sampler_sample(s, g->logits)) < 0) {
        cli_error("%s: sampling found no candidate: the logits hold NaN or infinity", r->o->model);
        return -1;
    }
    return 0;
}

static int decode_loop(run *r, sampler *s, gen *g, tok_decoder *d, stop_filter *sf, int32_t am) {
    uint32_t pos = (uint32_t)g->n_prompt;
    double t0 = cli_now();
    for (;;) {
        int32_t next;
        if (choose(r, s, g, am, &next)) return -1;
        if (g->n_ids == 0) {
            const double now = cli_now();
            g->ttft_s = g->prefill_s + (now - t0);
            g->first_s = now - r->t_start;
        }
        if (!r->o->ignore_eos && (is_stop_token(r, next) || is_bos(r, next))) {
            g->stop = is_bos(r, next) ? "bos" : "eos";
            break;
        }
        g->ids[g->n_ids++] = next;
        int hit = emit_token(r, d, sf, next);
        if (hit < 0) return cli_error("decoding token %d failed", next), -1;
        if (hit) {
            g->stop = "stop_string";
            break;
        }
        if (r->o->max_tokens >= 0 && g->n_ids == (size_t)r->o->max_tokens) {
            g->stop = "max_tokens";
            break;
        }
        if (pos >= r->ctx) {
            g->stop = "context";
            if (!r->o->quiet && !r->o->json)
                fprintf(stderr, "\n%s: note: reached the context limit of %u positions%s\n",
                        cli_prog(), r->ctx, ctx_hint(r));
            break;
        }
        int rc;
        if (r->be->greedy && !g->logits && s->temperature == 0.0f) {
            /* the step after this one is needed unless this one gives the last token */
            int ahead = (r->o->max_tokens < 0 || g->n_ids + 1 < (size_t)r->o->max_tokens) && pos + 1 < r->ctx;
            rc = r->be->greedy(r->sess, next, pos++, ahead, &am);
        } else {
            rc = r->be->forward(r->sess, &next, 1, pos++, g->logits, &am);
        }
        if (rc) return cli_error("%s: %s: generation failed: %s", r->o->model, r->be->name, r->be->error(r->sess)), -1;
        g->n_forward++;
    }
    g->decode_s = cli_now() - t0;
    return 0;
}

static void print_json(const run *r, const gen *g, const out_text *t) {
    json_t *ids = json_array();
    for (size_t i = 0; ids && i < g->n_ids; i++) json_array_append_new(ids, json_integer(g->ids[i]));
    json_t *j = json_pack(
        "{ss ss ss sI ss sI sf sI sf sf sI sf sf sf ss so ss sI sI sb sf}", "model", r->o->model, "digest",
        r->digest, "device", r->be->name, "threads", (json_int_t)r->threads, "kv_dtype",
        thin_dtype_name(r->p.kv_dtype), "weight_bytes", (json_int_t)r->p.weight_bytes, "load_s",
        r->load_s, "prompt_tokens", (json_int_t)g->n_prompt, "prefill_s", g->prefill_s,
        "prefill_tok_s", g->prefill_s > 0 ? (double)g->n_prompt / g->prefill_s : 0.0,
        "generated_tokens", (json_int_t)g->n_ids, "decode_s", g->decode_s, "decode_tok_s",
        g->decode_s > 0 ? (double)g->n_forward / g->decode_s : 0.0, "ttft_s", g->ttft_s, "stop",
        g->stop ? g->stop : "none", "ids", ids, "text", t->buf ? t->buf : "", "shards", (json_int_t)r->p.shards,
        "ctx", (json_int_t)r->ctx, "prepared", r->prepared, "start_to_first_s", g->first_s);
    char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
    if (s) printf("%s\n", s);
    free(s);
    json_decref(j);
}

static void discard(void *user, const char *s, size_t n) { (void)user, (void)s, (void)n; }

/* Sends the prompt through the decoder, so that the generation's first piece decodes as a
 * continuation; its text is shown with --echo and dropped otherwise. */
static int decode_prompt(run *r, tok_decoder *d, stop_filter *sf, const int32_t *ids, size_t n) {
    stop_filter quiet;
    stop_filter_init(&quiet, NULL, 0, discard, NULL);
    if (!r->tk && !r->o->echo) return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_bos(r, ids[i]) && emit_token(r, d, r->o->echo ? sf : &quiet, ids[i]) < 0)
            return -1;
    return 0;
}

static int generate_text(run *r, gen *g, const int32_t *prompt) {
    const options *o = r->o;
    sampler s;
    tok_decoder d;
    stop_filter sf;
    out_text t = {o->json, NULL, 0, 0, 0};
    int32_t am = 0;
    if (sampler_init(&s, r->p.hp.vocab_size, (float)o->temperature, (uint32_t)o->top_k,
                     (float)o->top_p, o->seed))
        return cli_error("out of memory"), CLI_EXIT_DATA;
    if (r->tk) tok_decoder_init(&d, r->tk);
    stop_filter_init(&sf, o->stops, o->n_stops, text_out, &t);
    int rc = CLI_EXIT_DATA;
    if (decode_prompt(r, &d, &sf, prompt, g->n_prompt)) cli_error("decoding failed");
    else if (prefill(r, prompt, g->n_prompt, g, &am))
        cli_error("%s: %s: running the prompt failed: %s", r->o->model, r->be->name, r->be->error(r->sess));
    else if (decode_loop(r, &s, g, &d, &sf, am) == 0) rc = 0;
    if (r->tk) {
        char tail[64];
        size_t n = 0;
        if (tok_decoder_flush(&d, tail, sizeof tail, &n) == 0 && n) stop_filter_push(&sf, tail, n);
    }
    stop_filter_finish(&sf);
    if (!o->json && !t.failed && (rc == 0 || t.len)) text_out(&t, "\n", 1); /* no lone newline */
    if (t.failed) rc = CLI_EXIT_DATA, cli_error("writing the text failed");
    if (!rc && o->json) print_json(r, g, &t);
    free(t.buf);
    sampler_free(&s);
    return rc;
}

static int generate(run *r) {
    const options *o = r->o;
    gen g = {0};
    const int32_t *prompt = r->prompt;
    g.n_prompt = r->n_prompt;
    int rc = 0;
    if (g.n_prompt > r->ctx) {
        cli_error("the prompt has %zu tokens, more than the context of %u positions%s", g.n_prompt,
                  r->ctx, ctx_hint(r));
        return CLI_EXIT_DATA;
    }
    /* the host needs a row of logits per token only to dump them, or to sample where the backend
     * cannot */
    int need_logits = o->dump_logits || (o->temperature > 0 && !r->be->sample);
    g.ids = malloc(((size_t)r->ctx + 1) * sizeof *g.ids);
    g.logits = need_logits ? malloc((size_t)r->p.hp.vocab_size * sizeof(float)) : NULL;
    if (!g.ids || (need_logits && !g.logits)) rc = CLI_EXIT_DATA, cli_error("out of memory");
    else if (o->dump_logits && !(g.dump = fopen(o->dump_logits, "wb")))
        rc = CLI_EXIT_DATA, cli_error("%s: cannot create: %s", o->dump_logits, strerror(errno));
    if (!rc) rc = generate_text(r, &g, prompt);
    if (g.dump && fclose(g.dump) && !rc)
        rc = CLI_EXIT_DATA, cli_error("%s: write failed", o->dump_logits);
    free(g.ids);
    free(g.logits);
    return rc;
}

/* ---- scoring ---- */

static int score_rows(run *r, const int32_t *ids, size_t n, FILE *out, const char *out_name) {
    uint32_t vocab = r->p.hp.vocab_size, batch = r->be->score_batch ? r->be->score_batch : 1;
    float *rows = malloc((size_t)batch * vocab * sizeof *rows);
    if (!rows) return cli_error("out of memory"), CLI_EXIT_DATA;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i += batch) {
        uint32_t k = n - i < batch ? (uint32_t)(n - i) : batch;
        if (r->be->forward(r->sess, ids + i, k, (uint32_t)i, rows, NULL))
            rc = CLI_EXIT_DATA, cli_error("%s: %s: positions %zu..%zu failed: %s", r->o->model, r->be->name, i,
                                          i + k - 1, r->be->error(r->sess));
        else if (fwrite(rows, sizeof *rows * vocab, k, out) != k)
            rc = CLI_EXIT_DATA, cli_error("%s: write failed", out_name);
    }
    free(rows);
    return rc;
}

static int score(run *r) {
    const options *o = r->o;
    char *text, err[512];
    size_t len, n;
    int32_t *ids;
    if (read_whole(o->score, &text, &len))
        return cli_error("%s: cannot read: %s", o->score, strerror(errno)), CLI_EXIT_DATA;
    int rc = ids_parse(text, r->p.hp.vocab_size, &ids, &n, err, sizeof err);
    free(text);
    if (rc) return cli_error("%s: %s", o->score, err), CLI_EXIT_DATA;
    int to_stdout = !o->out || strcmp(o->out, "-") == 0;
    FILE *out = to_stdout ? stdout : fopen(o->out, "wb");
    if (n > r->ctx)
        rc = CLI_EXIT_DATA, cli_error("%s: %zu ids, more than the context of %u positions%s",
                                      o->score, n, r->ctx, ctx_hint(r));
    else if (!out) rc = CLI_EXIT_DATA, cli_error("%s: cannot create: %s", o->out, strerror(errno));
    else if (to_stdout && cli_stdout_is_tty())
        rc = CLI_EXIT_DATA, cli_error("refusing to write binary logits to a terminal (use --out)");
    else rc = score_rows(r, ids, n, out, to_stdout ? "stdout" : o->out);
    if (out && !to_stdout && fclose(out) && !rc)
        rc = CLI_EXIT_DATA, cli_error("%s: write failed", o->out);
    free(ids);
    return rc;
}

int main(int argc, char **argv) {
    const double t_start = cli_now();
    options o;
    cli_init(argv[0]);
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    run r = {.o = &o, .chat_stop = -1, .threads = o.threads ? (unsigned)o.threads : thin_cpu_count(),
             .t_start = t_start};
    rc = load(&r);
    if (!rc) rc = o.score ? score(&r) : generate(&r);
    unload(&r);
    if (cli_close_stdout() && !rc) rc = CLI_EXIT_DATA;
    return rc;
}
