/* thin-quant — FP8 E4M3 (per-row scales) and BF16 quantization of a .thin model. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "report.h"
#include "rewrite.h"
#include "select.h"
#include "thin.h"

#define MAX_SELECT 64

typedef struct args {
    tq_options o;
    tq_selection sel;
    const char *select_args[MAX_SELECT];
    const char *json;   /* --json target, or NULL */
    int quiet;
} args;

static void usage(void)
{
    printf("Usage: %s [OPTIONS] INPUT [-o OUTPUT]\n"
           "Quantizes a .thin model: chosen linear weights to FP8 E4M3 with one F32 scale per\n"
           "output row (tensor \"<name>.scale\"), wider floats to BF16 where the profile says so;\n"
           "every other tensor, blob and manifest section is copied unchanged.\n\n"
           "INPUT is a .thin file or - (stdin, e.g. from thin-pack).\n\n"
           "  -o, --output FILE      write FILE (atomically); - or absent: stdout (not a terminal)\n"
           "  -p, --profile NAME     quality | fp8-all | bf16 (see below)\n"
           "      --roles LIST       FP8 for these roles, e.g. gate,up,down (no profile)\n"
           "      --layers RANGES    ... in these layers, e.g. 2-33 or 0-3,30- (no profile)\n"
           "      --select ROLES[:RANGES|:none]  per-role layers, replacing the profile's or\n"
           "                         --roles rule for them, e.g. down:9-26; repeatable\n"
           "      --scale mse|absmax FP8 row scale: mse (default) picks, per row, the scale with\n"
           "                         the least squared error among max|row|/448 x (1 + k/64),\n"
           "                         k = 0..63; absmax is max|row|/448\n"
           "      --n-layers N       layer count for the quality profile's middle layers\n"
           "                         (default: the model section; see the note on stdin)\n"
           "      --compress none|zstd[:LEVEL]  chunk codec (default none)\n"
           "      --chunk-size SIZE  raw bytes per chunk, K/M/G suffixes, multiple of 4K (default 4M)\n"
           "      --threads N        threads (default: all cores); the output does not depend on it\n"
           "      --json FILE        write a JSON report to FILE (- = stdout, unless the .thin\n"
           "                         goes there)\n"
           "      --progress, --no-progress  progress on stderr (default: when it is a terminal)\n"
           "  -q, --quiet            no table, warnings or progress\n"
           "  -h, --help             this help\n"
           "  -V, --version          version\n\n"
           "Profiles (n = number of layers):\n"
           "  quality  FP8: gate and up in every layer, down in layers [2, n-2); other\n"
           "           F32/F16/F64 matrices to BF16; 1-D tensors (norms) keep their dtype;\n"
           "           runtime.kv_cache_dtype = BF16\n"
           "  fp8-all  FP8: q k v o qkv gate up gate_up down, lm_head unless tied; embedding kept\n"
           "  bf16     F32/F16/F64 matrices to BF16, nothing to FP8\n\n"
           "With the quality profile on a pipe, the input is first copied to a temporary file\n"
           "(in $TMPDIR) to read the layer count, unless --n-layers or --select down:... is given.\n\n"
           "Exit status: 0 done, 1 bad input (e.g. NaN/Inf in a weight) or failure (no output\n"
           "left), 2 usage error.\n",
           cli_prog());
}

/* Options about the choice of tensors. Returns 0 when handled, 1 when c is not one, or an exit
 * code (> 1) for a usage error. */
enum { O_ROLES = 256, O_LAYERS, O_SELECT, O_NLAYERS, O_COMPRESS, O_CHUNK, O_THREADS, O_JSON,
       O_PROGRESS, O_NO_PROGRESS, O_SCALE };

static int parse_choice(args *a, int c, const char *arg)
{
    char err[256];
    long long n;
    switch (c) {
    case 'p':
        if (tq_profile_parse(arg, &a->sel.profile))
            return cli_usage_error("--profile: '%s' is not quality, fp8-all or bf16", arg);
        return 0;
    case O_ROLES:
        if (tq_selection_roles(&a->sel, arg, err, sizeof err))
            return cli_usage_error("--roles: %s", err);
        a->o.roles_arg = arg;
        return 0;
    case O_LAYERS:
        if (tq_selection_layers(&a->sel, arg, err, sizeof err))
            return cli_usage_error("--layers: %s", err);
        a->o.layers_arg = arg;
        return 0;
    case O_SELECT:
        if (a->o.n_select == MAX_SELECT)
            return cli_usage_error("--select: more than %d given", MAX_SELECT);
        if (tq_selection_select(&a->sel, arg, err, sizeof err))
            return cli_usage_error("--select: %s", err);
        a->select_args[a->o.n_select++] = arg;
        return 0;
    case O_SCALE:
        if (tq_scale_parse(arg, &a->o.scale))
            return cli_usage_error("--scale: '%s' is not mse or absmax", arg);
        return 0;
    case O_NLAYERS:
        if (cli_parse_int(arg, 1, TQ_MAX_LAYERS, &n))
            return cli_usage_error("--n-layers: '%s' is not a number from 1 to %d", arg,
                                   TQ_MAX_LAYERS);
        a->o.n_layers = (uint32_t)n;
        return 0;
    default:
        return 1;
    }
}

/* Output and writer options; same return convention as parse_choice. */
static int parse_output(args *a, int c, const char *arg)
{
    uint64_t size;
    long long n;
    switch (c) {
    case 'o': a->o.output = arg; return 0;
    case O_JSON: a->json = arg; return 0;
    case O_COMPRESS:
        if (cli_parse_compress(arg, &a->o.wopt))
            return cli_usage_error("--compress: '%s' is not none, zstd or zstd:1..22", arg);
        return 0;
    case O_CHUNK:
        if (cli_parse_size(arg, &size) || size == 0 || size % 4096 || size > THIN_MAX_CHUNK)
            return cli_usage_error("--chunk-size: '%s' is not a multiple of 4K up to 2G", arg);
        a->o.wopt.chunk_size = (size_t)size;
        return 0;
    case O_THREADS:
        if (cli_parse_int(arg, 1, 1024, &n))
            return cli_usage_error("--threads: '%s' is not a number from 1 to 1024", arg);
        a->o.threads = (unsigned)n;
        return 0;
    case O_PROGRESS: cli_progress_mode(1); return 0;
    case O_NO_PROGRESS: cli_progress_mode(0); return 0;
    case 'q': a->quiet = 1; cli_set_quiet(1); cli_progress_mode(0); return 0;
    default: return 1;
    }
}

/* Returns 0 to run, -1 when --help/--version was handled, or a usage exit code. */
static int parse_args(int argc, char **argv, args *a)
{
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'},      {"profile", required_argument, 0, 'p'},
        {"roles", required_argument, 0, O_ROLES},   {"layers", required_argument, 0, O_LAYERS},
        {"select", required_argument, 0, O_SELECT}, {"n-layers", required_argument, 0, O_NLAYERS},
        {"scale", required_argument, 0, O_SCALE},
        {"compress", required_argument, 0, O_COMPRESS},
        {"chunk-size", required_argument, 0, O_CHUNK},
        {"threads", required_argument, 0, O_THREADS}, {"json", required_argument, 0, O_JSON},
        {"progress", no_argument, 0, O_PROGRESS}, {"no-progress", no_argument, 0, O_NO_PROGRESS},
        {"quiet", no_argument, 0, 'q'},             {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},           {0, 0, 0, 0},
    };
    int c, rc;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:p:qhV", opts, NULL)) != -1) {
        if (c == 'h') {
            usage();
            return -1;
        }
        if (c == 'V') {
            printf("thin-quant %s\n", THIN_LIB_VERSION);
            return -1;
        }
        if (c == ':')
            return cli_usage_error("option '%s' needs a value", argv[optind - 1]);
        if ((rc = parse_choice(a, c, optarg)) == 1 && (rc = parse_output(a, c, optarg)) == 1)
            return cli_usage_error("unknown option '%s'", argv[optind - 1]);
        if (rc)
            return rc;
    }
    if (optind + 1 != argc)
        return cli_usage_error(optind == argc ? "no input given" : "more than one input given");
    a->o.input = argv[optind];
    return 0;
}

/* Checks the combination of options once all are read. */
static int check_args(args *a)
{
    char err[256];
    if (tq_selection_check(&a->sel, err, sizeof err))
        return cli_usage_error("%s", err);
    if (!a->o.output)
        a->o.output = "-";
    int thin_to_stdout = strcmp(a->o.output, "-") == 0;
    if (a->json && strcmp(a->json, "-") == 0 && thin_to_stdout)
        return cli_usage_error("--json -: stdout already carries the .thin output; give a file");
    if (thin_to_stdout && cli_stdout_is_tty())
        return cli_usage_error("refusing to write a .thin file to a terminal; use -o FILE or a "
                               "pipe");
    if (!a->o.threads)
        a->o.threads = thin_cpu_count();
    a->o.wopt.threads = a->o.threads;
    a->o.sel = &a->sel;
    a->o.select_args = a->select_args;
    return 0;
}

static int write_json(const args *a, const tq_report *rep)
{
    int to_stdout = strcmp(a->json, "-") == 0;
    FILE *f = to_stdout ? stdout : fopen(a->json, "w");
    if (!f) {
        cli_error("%s: cannot create: %m", a->json);
        return CLI_EXIT_DATA;
    }
    int bad = tq_report_write_json(rep, a->o.input, a->o.output,
                                   tq_profile_name(a->sel.profile), f) != 0;
    if (!to_stdout)
        bad |= fclose(f) != 0;
    if (bad) {
        cli_error("%s: write error", a->json);
        return CLI_EXIT_DATA;
    }
    return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
    args *a = calloc(1, sizeof *a);
    if (!a) {
        fprintf(stderr, "thin-quant: out of memory\n");
        return CLI_EXIT_DATA;
    }
    cli_init(argv[0]);
    tq_selection_init(&a->sel);
    int rc = parse_args(argc, argv, a);
    if (rc == 0)
        rc = check_args(a);
    if (rc) {
        free(a);
        return rc > 0 ? rc : (cli_close_stdout() ? CLI_EXIT_DATA : CLI_EXIT_OK);
    }
    tq_report rep;
    tq_report_init(&rep);
    rc = tq_rewrite(&a->o, &rep);
    if (rc == CLI_EXIT_OK && !a->quiet)
        tq_report_print(&rep, stderr);
    if (rc == CLI_EXIT_OK && a->json)
        rc = write_json(a, &rep);
    int uses_stdout = strcmp(a->o.output, "-") == 0 || (a->json && strcmp(a->json, "-") == 0);
    if (uses_stdout && cli_close_stdout() && rc == CLI_EXIT_OK)
        rc = CLI_EXIT_DATA;
    tq_report_free(&rep);
    free(a);
    return rc;
}
