/* thin-inspect — lists, verifies and extracts the contents of a .thin file (path or stdin). */
#include <fcntl.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "show.h"
#include "stats.h"
#include "thin.h"

typedef struct opts {
    const char *input;
    const char *extract;
    int tape, verify, json, stats;
    unsigned threads;
    show_filter filter;
} opts;

static void usage(void)
{
    printf("Usage: %s [OPTIONS] FILE|-\n"
           "Lists the tensors of a .thin file (name, role, layer, dtype, shape, bytes, stored\n"
           "bytes, chunks), a summary by role and by dtype, and the model section.\n\n"
           "      --tape            print the execution tape\n"
           "      --verify          check every chunk checksum and the whole-file digest\n"
           "      --stats           each tensor's values: min, max, mean, std, rms, NaN, inf,\n"
           "                        zeros (FP8 dequantized with its row scales); exit 1 when a\n"
           "                        tensor holds NaN or infinite values\n"
           "      --json            machine-readable output (fields are only ever added)\n"
           "      --extract NAME    write tensor NAME's raw bytes to stdout (not a terminal)\n"
           "      --role ROLE       list only tensors of ROLE (q, k, gate, lm_head, other, ...)\n"
           "      --layer N         list only tensors of layer N (-1: global tensors)\n"
           "      --dtype DTYPE     list only tensors of DTYPE (F32, BF16, F8_E4M3, ...)\n"
           "      --threads N       verification and statistics threads (default: all cores)\n"
           "      --progress, --no-progress  progress on stderr (default: when it is a terminal)\n"
           "  -q, --quiet           no progress or warnings\n"
           "  -h, --help            this help\n"
           "  -V, --version         version\n\n"
           "FILE - reads a stream in one pass (thin-pack model/ | thin-inspect -).\n"
           "Exit status: 0 fine, 1 bad or corrupt file (the message names tensor and chunk),\n"
           "2 usage error.\n", cli_prog());
}

static int parse_args(int argc, char **argv, opts *o)
{
    enum { O_TAPE = 256, O_VERIFY, O_JSON, O_EXTRACT, O_ROLE, O_LAYER, O_DTYPE, O_THREADS,
           O_PROGRESS, O_NO_PROGRESS, O_STATS };
    static const struct option lo[] = {
        {"tape", no_argument, 0, O_TAPE},       {"verify", no_argument, 0, O_VERIFY},
        {"json", no_argument, 0, O_JSON},       {"extract", required_argument, 0, O_EXTRACT},
        {"stats", no_argument, 0, O_STATS},
        {"role", required_argument, 0, O_ROLE}, {"layer", required_argument, 0, O_LAYER},
        {"dtype", required_argument, 0, O_DTYPE}, {"threads", required_argument, 0, O_THREADS},
        {"progress", no_argument, 0, O_PROGRESS}, {"no-progress", no_argument, 0, O_NO_PROGRESS},
        {"quiet", no_argument, 0, 'q'},         {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},       {0, 0, 0, 0},
    };
    int c;
    long long n;
    thin_role r;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":qhV", lo, NULL)) != -1) {
        switch (c) {
        case O_TAPE: o->tape = 1; break;
        case O_VERIFY: o->verify = 1; break;
        case O_JSON: o->json = 1; break;
        case O_STATS: o->stats = 1; break;
        case O_EXTRACT: o->extract = optarg; break;
        case O_ROLE:
            if (thin_role_from_name(optarg, &r) != THIN_OK)
                return cli_usage_error("--role: unknown role '%s'", optarg);
            o->filter.role = optarg;
            break;
        case O_LAYER:
            if (cli_parse_int(optarg, -1, 1 << 30, &n))
                return cli_usage_error("--layer: '%s' is not a layer number (or -1)", optarg);
            o->filter.layer = n;
            break;
        case O_DTYPE:
            if (thin_dtype_from_name(optarg) == THIN_DTYPE_INVALID)
                return cli_usage_error("--dtype: unknown dtype '%s'", optarg);
            o->filter.dtype = optarg;
            break;
        case O_THREADS:
            if (cli_parse_int(optarg, 1, 1024, &n))
                return cli_usage_error("--threads: '%s' is not a number from 1 to 1024", optarg);
            o->threads = (unsigned)n;
            break;
        case O_PROGRESS: cli_progress_mode(1); break;
        case O_NO_PROGRESS: cli_progress_mode(0); break;
        case 'q': cli_set_quiet(1); cli_progress_mode(0); break;
        case 'h': usage(); return -1;
        case 'V': printf("thin-inspect %s\n", THIN_LIB_VERSION); return -1;
        case ':': return cli_usage_error("option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind + 1 != argc)
        return cli_usage_error(optind == argc ? "no input given" : "more than one input given");
    o->input = argv[optind];
    if (o->extract && (o->stats || o->tape || o->json))
        return cli_usage_error("--extract writes a tensor's bytes: not with --stats, --tape or --json");
    if (o->stats && o->tape && !o->json)
        return cli_usage_error("--stats and --tape: one listing at a time (or both with --json)");
    if (o->extract && cli_stdout_is_tty())
        return cli_usage_error("refusing to write tensor bytes to a terminal");
    return 0;
}

static int progress(void *user, uint64_t done, uint64_t total)
{
    cli_progress("verifying", done, total);
    (void)user;
    return 0;
}

/* Prints the listing chosen by the options (st: the statistics with --stats). */
static int report(const opts *o, show_file *sf, const stats_set *st)
{
    if (o->json) {
        json_t *j = show_json(sf, &o->filter, o->tape);
        if (j && st)
            stats_json(j, st);
        if (!j || json_dumpf(j, stdout, JSON_INDENT(2)) != 0) {
            json_decref(j);
            cli_error("out of memory");
            return CLI_EXIT_DATA;
        }
        fputc('\n', stdout);
        json_decref(j);
    } else if (st) {
        stats_text(stdout, st, sf, &o->filter);
    } else if (o->tape) {
        if (show_tape(stdout, sf->manifest)) {
            cli_error("%s: no execution tape", sf->label);
            return CLI_EXIT_DATA;
        }
    } else {
        show_text(stdout, sf, &o->filter);
    }
    /* --stats: a tensor holding NaN or infinite values is bad data, after the listing */
    return st && stats_report_nonfinite(st, sf, &o->filter) ? CLI_EXIT_DATA : CLI_EXIT_OK;
}

static json_t *parse_manifest(const char *label, const char *text, size_t len)
{
    json_error_t je;
    json_t *m = json_loadb(text, len, 0, &je);
    if (!m)
        cli_error("%s: manifest: %s", label, je.text);
    return m;
}

static int extract_file(thin_file *f, const char *label, const char *name)
{
    thin_tensor_info ti;
    const void *data;
    if (thin_file_find(f, name, &ti) != THIN_OK) {
        cli_error("%s: no tensor named '%s'", label, name);
        return CLI_EXIT_DATA;
    }
    void *buf = NULL;
    if (thin_file_tensor_data(f, ti.index, &data) != THIN_OK) {
        if (ti.nbytes > SIZE_MAX || !(buf = malloc(ti.nbytes ? (size_t)ti.nbytes : 1))) {
            cli_error("%s: out of memory for tensor '%s'", label, name);
            return CLI_EXIT_DATA;
        }
        if (thin_file_tensor_read(f, ti.index, buf, (size_t)ti.nbytes, 1) != THIN_OK) {
            cli_error("%s", thin_file_error(f));
            free(buf);
            return CLI_EXIT_DATA;
        }
        data = buf;
    }
    int bad = cli_write_all(1, data, (size_t)ti.nbytes);
    free(buf);
    if (bad) {
        cli_error("stdout: write error");
        return CLI_EXIT_DATA;
    }
    return CLI_EXIT_OK;
}

static int run_stream(const opts *o, int fd, const char *label);

/* --stats on a mapped file: in place on threads, or read again as a stream when chunks are
 * compressed (bounded memory where a whole tensor would have to be decompressed). */
static int file_stats(const opts *o, thin_file *f, show_file *sf)
{
    stats_set *st = stats_new();
    int r = st ? stats_file(st, f, &o->filter, o->threads) : -1, rc = CLI_EXIT_DATA;
    if (r < 0) {
        cli_error("%s: out of memory for the statistics", sf->label);
    } else if (r == 0) {
        rc = report(o, sf, st);
    } else {
        int fd = open(o->input, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            cli_error("%s: cannot open: %s", o->input, strerror(errno));
        else
            rc = run_stream(o, fd, o->input);
        if (fd >= 0)
            close(fd);
    }
    stats_free(st);
    return rc;
}

static int run_file(const opts *o)
{
    thin_file *f = thin_file_new();
    const char *text;
    size_t len;
    char hex[65];
    int rc = CLI_EXIT_DATA;
    if (!f) {
        cli_error("out of memory");
        return rc;
    }
    if (thin_file_open(f, o->input, 0) != THIN_OK || thin_file_manifest(f, &text, &len) != THIN_OK) {
        cli_error("%s", thin_file_error(f));
        thin_file_free(f);
        return rc;
    }
    show_file sf = {o->input, thin_file_size(f), hex, parse_manifest(o->input, text, len), -1};
    thin_hex32(thin_file_digest(f), hex);
    if (!sf.manifest)
        ;
    else if (o->verify && thin_file_verify(f, o->threads, progress, NULL) != THIN_OK) {
        cli_progress_end();
        cli_error("%s", thin_file_error(f));
    } else {
        cli_progress_end();
        sf.verified = o->verify ? 1 : -1;
        rc = o->extract ? extract_file(f, o->input, o->extract)
             : o->stats ? file_stats(o, f, &sf)
                        : report(o, &sf, NULL);
    }
    json_decref(sf.manifest);
    thin_file_free(f);
    return rc;
}

/* Reads the current stream item to its end, to stdout or nowhere (checking chunk hashes). */
static int drain(thin_stream *s, uint8_t *buf, size_t cap, int to_stdout)
{
    size_t got;
    do {
        if (thin_stream_read(s, buf, cap, &got) != THIN_OK) {
            cli_error("%s", thin_stream_error(s));
            return -1;
        }
        if (to_stdout && got && cli_write_all(1, buf, got)) {
            cli_error("stdout: write error");
            return -1;
        }
    } while (got > 0);
    return 0;
}

/* The current tensor's bytes into the statistics (checking chunk hashes). */
static int sum_item(thin_stream *s, const char *label, stats_set *st, const thin_tensor_info *ti,
                    uint8_t *buf, size_t cap)
{
    size_t got;
    if (stats_begin(st, ti)) {
        cli_error("%s: out of memory for the statistics of tensor '%s'", label, ti->name);
        return -1;
    }
    do {
        if (thin_stream_read(s, buf, cap, &got) != THIN_OK) {
            cli_error("%s", thin_stream_error(s));
            return -1;
        }
        stats_feed(st, buf, got);
    } while (got > 0);
    if (stats_end(st)) {
        cli_error("%s: tensor '%s': its bytes do not match its size", label, ti->name);
        return -1;
    }
    return 0;
}

static int walk_stream(const opts *o, thin_stream *s, const char *label, int *found, stats_set *st)
{
    size_t cap = (size_t)4 << 20;
    uint8_t *buf = malloc(cap);
    thin_item_kind kind;
    thin_tensor_info ti;
    int rc = buf ? 0 : -1;
    uint64_t done = 0;
    while (!rc) {
        if (thin_stream_next(s, &kind, &ti) != THIN_OK) {
            cli_error("%s", thin_stream_error(s));
            rc = -1;
            break;
        }
        if (kind == THIN_ITEM_END)
            break;
        int hit = o->extract && kind == THIN_ITEM_TENSOR && strcmp(ti.name, o->extract) == 0;
        *found |= hit;
        if (st && kind == THIN_ITEM_TENSOR && (stats_match(&o->filter, &ti) || ti.role == THIN_ROLE_SCALE))
            rc = sum_item(s, label, st, &ti, buf, cap);
        else if (hit || o->verify)
            rc = drain(s, buf, cap, hit);
        done += ti.nbytes;
        if (o->verify || st)
            cli_progress(st ? "summing" : "verifying", done, 0);
    }
    cli_progress_end();
    free(buf);
    return rc;
}

/* A .thin stream from fd, in one pass. */
static int run_stream(const opts *o, int fd, const char *label)
{
    thin_stream *s = thin_stream_new();
    stats_set *st = o->stats ? stats_new() : NULL;
    const char *text = NULL;
    size_t len = 0;
    char hex[65];
    int found = 0, rc = CLI_EXIT_DATA;
    if (!s || (o->stats && !st)) {
        cli_error("out of memory");
        thin_stream_free(s);
        stats_free(st);
        return rc;
    }
    if (thin_stream_open_fd(s, fd, label) != THIN_OK ||
        (walk_stream(o, s, label, &found, st) == 0 && thin_stream_manifest(s, &text, &len) != THIN_OK))
        cli_error("%s", thin_stream_error(s));
    if (!text) {
        thin_stream_free(s);
        stats_free(st);
        return rc;
    }
    thin_hex32(thin_stream_digest(s), hex);
    show_file sf = {label, thin_stream_size(s), hex, parse_manifest(label, text, len),
                    o->verify ? 1 : -1};
    if (o->extract && !found)
        cli_error("%s: no tensor named '%s'", label, o->extract);
    else if (o->extract)
        rc = CLI_EXIT_OK;
    else if (sf.manifest) {
        if (st)
            stats_resolve(st, sf.manifest);
        rc = report(o, &sf, st);
    }
    json_decref(sf.manifest);
    thin_stream_free(s);
    stats_free(st);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    o.filter.layer = -2;
    cli_init(argv[0]);
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc > 0 ? rc : (cli_close_stdout() ? CLI_EXIT_DATA : CLI_EXIT_OK);
    rc = strcmp(o.input, "-") == 0 ? run_stream(&o, 0, "stdin") : run_file(&o);
    if (cli_close_stdout() && rc == CLI_EXIT_OK)
        rc = CLI_EXIT_DATA;
    return rc;
}
