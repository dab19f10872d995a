/*
 * thin-compare — compares two teacher-forced logit dumps of the same id sequence (raw F32
 * little-endian rows [positions][vocab], as `thin-run --score` writes them): per position and
 * overall centered-logit cosine, top-1 agreement and max abs difference.
 *
 * --json prints one object with these fields (only ever added to, never renamed):
 *   ref, test, vocab, positions, cosine_min, cosine_min_position, cosine_mean, top1_agree,
 *   top1_share, max_abs_diff, max_abs_diff_position, nonfinite_positions, pass,
 *   rows: [{position, cosine, top1_ref, top1_test, max_abs_diff}] (omitted with --summary)
 */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "compare.h"
#include "thin.h"

typedef struct options {
    const char *ref, *test, *model;
    uint64_t vocab;
    int json, summary;
    double min_cosine, min_top1; /* thresholds; below them exit 1 (negative: off) */
    double max_abs;              /* threshold; above it exit 1 (negative: off) */
} options;

static void usage(void) {
    printf("Usage: %s REF.f32 TEST.f32 (--vocab N | --model X.thin) [options]\n"
           "Compares two teacher-forced logit dumps (raw F32 rows [positions][vocab]).\n\n"
           "  --vocab N          floats per row\n"
           "  --model X.thin     read the vocabulary size from a model file\n"
           "  --json             one JSON object on stdout\n"
           "  --summary          overall figures only, no per-position lines\n"
           "  --min-cosine C     exit 1 when the minimum centered cosine is below C\n"
           "  --min-top1 S       exit 1 when the top-1 agreement share is below S\n"
           "  --max-abs D        exit 1 when the max abs difference is above D\n"
           "  -q, --quiet        no warnings\n"
           "  -h, --help         this help;  --version  the version\n"
           "Either file may be '-' (stdin). Exit 0 when compared (and thresholds met), 1 on\n"
           "bad or mismatched files or a missed threshold, 2 on a usage error.\n",
           cli_prog());
}

static int vocab_from_model(const char *path, uint64_t *vocab) {
    thin_file *f = thin_file_new();
    const char *text;
    json_t *m = NULL;
    int rc = -1;
    if (!f) return -1;
    if (thin_file_open(f, path, 0) != THIN_OK) cli_error("%s", thin_file_error(f));
    else if (thin_file_section(f, "model", &text) != THIN_OK || !(m = json_loads(text, 0, NULL)))
        cli_error("%s: no model section", path);
    else {
        json_t *v = json_object_get(json_object_get(m, "hparams"), "vocab_size");
        if (json_is_integer(v) && json_integer_value(v) > 0) {
            *vocab = (uint64_t)json_integer_value(v);
            rc = 0;
        } else cli_error("%s: model.hparams has no vocab_size", path);
    }
    json_decref(m);
    thin_file_free(f);
    return rc;
}

static int parse_args(int argc, char **argv, options *o) {
    enum { O_VOCAB = 256, O_MODEL, O_JSON, O_SUMMARY, O_MINCOS, O_MINTOP, O_MAXABS, O_VERSION };
    static const struct option lo[] = {
        {"vocab", 1, 0, O_VOCAB},        {"model", 1, 0, O_MODEL},     {"json", 0, 0, O_JSON},
        {"summary", 0, 0, O_SUMMARY},    {"min-cosine", 1, 0, O_MINCOS},
        {"min-top1", 1, 0, O_MINTOP},    {"max-abs", 1, 0, O_MAXABS},    {"quiet", 0, 0, 'q'},         {"help", 0, 0, 'h'},
        {"version", 0, 0, O_VERSION},    {0, 0, 0, 0}};
    *o = (options){.min_cosine = -2.0, .min_top1 = -1.0, .max_abs = -1.0};
    long long v;
    int c;
    while ((c = getopt_long(argc, argv, "qh", lo, NULL)) != -1) {
        switch (c) {
        case O_VOCAB:
            if (cli_parse_int(optarg, 1, 1ll << 32, &v)) return cli_usage_error("bad --vocab");
            o->vocab = (uint64_t)v;
            break;
        case O_MODEL: o->model = optarg; break;
        case O_JSON: o->json = 1; break;
        case O_SUMMARY: o->summary = 1; break;
        case O_MINCOS:
            if (cli_parse_float(optarg, &o->min_cosine)) return cli_usage_error("bad --min-cosine");
            break;
        case O_MINTOP:
            if (cli_parse_float(optarg, &o->min_top1)) return cli_usage_error("bad --min-top1");
            break;
        case O_MAXABS:
            if (cli_parse_float(optarg, &o->max_abs)) return cli_usage_error("bad --max-abs");
            break;
        case 'q': cli_set_quiet(1); break;
        case 'h': usage(); exit(cli_close_stdout());
        case O_VERSION: printf("%s %s\n", cli_prog(), THIN_LIB_VERSION); exit(cli_close_stdout());
        default: return CLI_EXIT_USAGE;
        }
    }
    if (argc - optind != 2) return cli_usage_error("expected two logit files");
    o->ref = argv[optind];
    o->test = argv[optind + 1];
    if (strcmp(o->ref, "-") == 0 && strcmp(o->test, "-") == 0)
        return cli_usage_error("only one of the files may be stdin");
    if (!o->vocab && !o->model) return cli_usage_error("give --vocab N or --model X.thin");
    if (!o->vocab && vocab_from_model(o->model, &o->vocab)) return CLI_EXIT_DATA;
    return 0;
}

static FILE *open_input(const char *path) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) cli_error("%s: cannot open: %m", path);
    return f;
}

/* For regular files, checks both sizes up front: whole rows, and the same number of them. */
static int check_sizes(const options *o, FILE *a, FILE *b) {
    struct stat sa, sb;
    uint64_t row = o->vocab * 4;
    if (fstat(fileno(a), &sa) || fstat(fileno(b), &sb) || !S_ISREG(sa.st_mode) ||
        !S_ISREG(sb.st_mode))
        return 0;
    if ((uint64_t)sa.st_size % row || (uint64_t)sb.st_size % row) {
        cli_error("%s: %lld bytes is not a whole number of rows of %llu floats",
                  (uint64_t)sa.st_size % row ? o->ref : o->test,
                  (long long)((uint64_t)sa.st_size % row ? sa.st_size : sb.st_size),
                  (unsigned long long)o->vocab);
        return -1;
    }
    if (sa.st_size != sb.st_size) {
        cli_error("%s has %llu rows but %s has %llu", o->ref,
                  (unsigned long long)((uint64_t)sa.st_size / row), o->test,
                  (unsigned long long)((uint64_t)sb.st_size / row));
        return -1;
    }
    if (sa.st_size == 0) {
        cli_error("%s: no rows", o->ref);
        return -1;
    }
    return 0;
}

/* Reads one row; 1 = got it, 0 = clean end of file, -1 = error (reported). */
static int read_row(FILE *f, const char *path, float *row, uint64_t vocab) {
    size_t got = fread(row, sizeof(float), (size_t)vocab, f);
    if (got == vocab) return 1;
    if (ferror(f)) cli_error("%s: read error", path);
    else if (got) cli_error("%s: ends inside a row", path);
    return got || ferror(f) ? -1 : 0;
}

static void print_row(const options *o, json_t *rows, const compare_row *r, uint64_t pos) {
    if (o->summary) return;
    if (rows)
        json_array_append_new(rows, json_pack("{sI sf sI sI sf}", "position", (json_int_t)pos,
                                              "cosine", r->cosine, "top1_ref",
                                              (json_int_t)r->ref_top, "top1_test",
                                              (json_int_t)r->test_top, "max_abs_diff",
                                              r->max_abs));
    else
        printf("%6llu  %.9f  %6u %6u %s  %.6g\n", (unsigned long long)pos, r->cosine, r->ref_top,
               r->test_top, r->ref_top == r->test_top ? "=" : "x", r->max_abs);
}

static int compare_files(const options *o, FILE *a, FILE *b, compare_summary *s, json_t *rows) {
    float *ra = malloc(o->vocab * sizeof(float)), *rb = malloc(o->vocab * sizeof(float));
    int rc = -1;
    if (!ra || !rb) {
        cli_error("out of memory for rows of %llu floats", (unsigned long long)o->vocab);
        goto out;
    }
    if (!o->json && !o->summary) printf("%6s  %-11s  %6s %6s    %s\n", "pos", "cosine", "ref",
                                        "test", "max_abs_diff");
    for (uint64_t pos = 0;; pos++) {
        int ga = read_row(a, o->ref, ra, o->vocab), gb = read_row(b, o->test, rb, o->vocab);
        if (ga < 0 || gb < 0) goto out;
        if (ga != gb) {
            cli_error("%s ends after %llu rows, before %s", ga ? o->test : o->ref,
                      (unsigned long long)pos, ga ? o->ref : o->test);
            goto out;
        }
        if (!ga) break;
        compare_row r;
        compare_rows(ra, rb, o->vocab, &r);
        compare_summary_add(s, &r, pos);
        print_row(o, rows, &r, pos);
    }
    if (s->rows == 0) cli_error("%s: no rows", o->ref);
    else rc = 0;
out:
    free(ra);
    free(rb);
    return rc;
}

static int passed(const options *o, const compare_summary *s) {
    return s->cosine_min >= o->min_cosine &&
           (double)s->top1_agree / (double)s->rows >= o->min_top1 &&
           (o->max_abs < 0 || s->max_abs <= o->max_abs) && s->nonfinite == 0;
}

static void report(const options *o, const compare_summary *s, json_t *rows) {
    double share = (double)s->top1_agree / (double)s->rows;
    if (o->json) {
        json_t *j = json_pack(
            "{ss ss sI sI sf sI sf sI sf sf sI sI sb}", "ref", o->ref, "test", o->test, "vocab",
            (json_int_t)o->vocab, "positions", (json_int_t)s->rows, "cosine_min", s->cosine_min,
            "cosine_min_position", (json_int_t)s->cosine_min_row, "cosine_mean",
            compare_summary_mean(s), "top1_agree", (json_int_t)s->top1_agree, "top1_share", share,
            "max_abs_diff", s->max_abs, "max_abs_diff_position", (json_int_t)s->max_abs_row,
            "nonfinite_positions", (json_int_t)s->nonfinite, "pass", passed(o, s));
        if (j && rows) json_object_set(j, "rows", rows);
        char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) : NULL;
        if (text) printf("%s\n", text);
        free(text);
        json_decref(j);
        return;
    }
    printf("positions %llu  vocab %llu\n", (unsigned long long)s->rows,
           (unsigned long long)o->vocab);
    printf("centered cosine  min %.9f (position %llu)  mean %.9f\n", s->cosine_min,
           (unsigned long long)s->cosine_min_row, compare_summary_mean(s));
    printf("top-1 agreement  %llu/%llu (%.2f%%)\n", (unsigned long long)s->top1_agree,
           (unsigned long long)s->rows, 100.0 * share);
    printf("max abs diff     %.6g (position %llu)\n", s->max_abs,
           (unsigned long long)s->max_abs_row);
    if (s->nonfinite) printf("non-finite rows  %llu\n", (unsigned long long)s->nonfinite);
}

int main(int argc, char **argv) {
    options o;
    cli_init(argv[0]);
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    FILE *a = open_input(o.ref), *b = a ? open_input(o.test) : NULL;
    compare_summary s;
    compare_summary_init(&s);
    json_t *rows = o.json && !o.summary ? json_array() : NULL;
    rc = CLI_EXIT_DATA;
    if (a && b && check_sizes(&o, a, b) == 0 && compare_files(&o, a, b, &s, rows) == 0) {
        report(&o, &s, rows);
        rc = passed(&o, &s) ? CLI_EXIT_OK : CLI_EXIT_DATA;
        if (rc && !o.json)
            cli_error("thresholds missed (or non-finite values): cosine min %.9f, top-1 %.4f, "
                      "max abs %.6g", s.cosine_min, (double)s.top1_agree / (double)s.rows,
                      s.max_abs);
    }
    json_decref(rows);
    if (a && a != stdin) fclose(a);
    if (b && b != stdin) fclose(b);
    if (cli_close_stdout()) rc = CLI_EXIT_DATA;
    return rc;
}
