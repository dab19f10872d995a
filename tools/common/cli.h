/*
 * cli.h — the small front-end shared by the thin-* tools: messages, option values, output files.
 *
 * Exit codes: 0 success, 1 bad data or a failed operation, 2 usage error.
 * Messages go to stderr as "PROG: text"; data goes to stdout.
 */
#ifndef THIN_CLI_H
#define THIN_CLI_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CLI_EXIT_OK 0
#define CLI_EXIT_DATA 1
#define CLI_EXIT_USAGE 2

/* Sets the program name used in messages (basename of argv[0]). */
void cli_init(const char *argv0);
const char *cli_prog(void);
/* Prints "PROG: message" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "PROG: warning: message" to stderr unless quiet was set. */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_set_quiet(int quiet);
int cli_quiet(void);
/* Prints "PROG: message" and "Try 'PROG --help'." to stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Formats a message into err (capacity errlen; both may be 0/NULL) and returns -1, for parsers
 * that report errors through a caller's buffer. */
int cli_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Parses a byte size with an optional K/M/G suffix (powers of 1024). Returns 0 or -1. */
int cli_parse_size(const char *s, uint64_t *out);
/* Parses a whole number in [lo, hi]. Returns 0 or -1. */
int cli_parse_int(const char *s, long long lo, long long hi, long long *out);
/* Parses a chunk codec, "none", "zstd" or "zstd:LEVEL" (1..22), into w's codec and level.
 * Returns 0 or -1. */
struct thin_writer_options;
int cli_parse_compress(const char *s, struct thin_writer_options *w);
/* Parses a float. Returns 0 or -1. */
int cli_parse_float(const char *s, double *out);
/* Parses a list of ranges "2-33,35,40-41" into a bitmap sel[0..n); an open end "30-" runs to n-1.
 * Returns 0, or -1 when malformed or out of range. */
int cli_parse_ranges(const char *s, unsigned char *sel, size_t n);

/* Progress on stderr: enabled by default only when stderr is a terminal. mode: -1 auto, 0 off, 1 on. */
void cli_progress_mode(int mode);
/* Shows "label: done/total MiB (pct%)" at most ~10 times a second; total 0 = unknown. */
void cli_progress(const char *label, uint64_t done, uint64_t total);
/* Ends the progress line. */
void cli_progress_end(void);

/* Whether writing binary data to stdout should be refused (stdout is a terminal). */
int cli_stdout_is_tty(void);
/* Flushes and closes stdout, reporting an error (e.g. closed pipe, full disk); returns 0 or 1. */
int cli_close_stdout(void);
/* Writes all n bytes to fd; returns 0 or -1 (errno set). */
int cli_write_all(int fd, const void *buf, size_t n);

/* Monotonic seconds. */
double cli_now(void);

#endif /* THIN_CLI_H */
