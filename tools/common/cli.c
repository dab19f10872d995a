/* cli.c — the shared front-end of the thin-* tools (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "thin.h"

static char g_prog[64] = "thin";
static int g_quiet;
static int g_progress = -1;
static double g_progress_last;
static int g_progress_shown;

void cli_init(const char *argv0)
{
    const char *b = argv0 ? strrchr(argv0, '/') : NULL;
    b = b ? b + 1 : (argv0 ? argv0 : "thin");
    snprintf(g_prog, sizeof g_prog, "%s", b);
}

const char *cli_prog(void) { return g_prog; }
void cli_set_quiet(int quiet) { g_quiet = quiet; }
int cli_quiet(void) { return g_quiet; }

static void vmsg(const char *prefix, const char *fmt, va_list ap)
{
    cli_progress_end();
    fprintf(stderr, "%s: %s", g_prog, prefix);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

void cli_warn(const char *fmt, ...)
{
    if (g_quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmsg("warning: ", fmt, ap);
    va_end(ap);
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try '%s --help'.\n", g_prog);
    return CLI_EXIT_USAGE;
}

int cli_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int cli_parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    if (*end)
        return -1;
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

int cli_parse_int(const char *s, long long lo, long long hi, long long *out)
{
    if (!s || !*s)
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_compress(const char *s, struct thin_writer_options *w)
{
    long long level = 0;
    if (strcmp(s, "none") == 0) {
        w->codec = THIN_CODEC_NONE;
        return 0;
    }
    if (strncmp(s, "zstd", 4) != 0 || (s[4] && s[4] != ':'))
        return -1;
    if (s[4] == ':' && cli_parse_int(s + 5, 1, 22, &level))
        return -1;
    w->codec = THIN_CODEC_ZSTD;
    w->zstd_level = (int)level;
    return 0;
}

int cli_parse_float(const char *s, double *out)
{
    if (!s || !*s)
        return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

int cli_parse_ranges(const char *s, unsigned char *sel, size_t n)
{
    if (!s || !*s)
        return -1;
    memset(sel, 0, n);
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        if (*p < '0' || *p > '9')
            return -1;
        unsigned long long a = strtoull(p, &end, 10), b = a;
        if (errno)
            return -1;
        p = end;
        if (*p == '-') {
            p++;
            if (*p >= '0' && *p <= '9') {
                b = strtoull(p, &end, 10);
                if (errno)
                    return -1;
                p = end;
            } else {
                if (n == 0)
                    return -1;
                b = n - 1;
            }
        }
        if (a > b || b >= n)
            return -1;
        for (unsigned long long i = a; i <= b; i++)
            sel[i] = 1;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return 0;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_progress_mode(int mode) { g_progress = mode; }

void cli_progress(const char *label, uint64_t done, uint64_t total)
{
    if (g_progress == 0 || g_quiet)
        return;
    if (g_progress < 0 && !isatty(STDERR_FILENO))
        return;
    double t = cli_now();
    if (g_progress_shown && t - g_progress_last < 0.1 && done != total)
        return;
    g_progress_last = t;
    g_progress_shown = 1;
    if (total)
        fprintf(stderr, "\r%s: %.1f/%.1f MiB (%3.0f%%)", label, done / 1048576.0,
                total / 1048576.0, 100.0 * (double)done / (double)total);
    else
        fprintf(stderr, "\r%s: %.1f MiB", label, done / 1048576.0);
    fflush(stderr);
}

void cli_progress_end(void)
{
    if (g_progress_shown) {
        fputc('\n', stderr);
        g_progress_shown = 0;
    }
}

int cli_stdout_is_tty(void) { return isatty(STDOUT_FILENO); }

int cli_close_stdout(void)
{
    int bad = ferror(stdout);
    if (fflush(stdout) != 0)
        bad = 1;
    int e = errno;
    if (fclose(stdout) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        cli_error("error writing standard output: %s", strerror(e ? e : EIO));
        return 1;
    }
    return 0;
}

int cli_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}
