/* thin-pack — packs a SafeTensors model (file, shards, folder, archive or stdin) into .thin. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "pack.h"
#include "thin.h"

static void usage(void)
{
    printf("Usage: %s [OPTIONS] INPUT [-o OUTPUT]\n"
           "Packs a SafeTensors model into one .thin file: tensors with roles and layers, the\n"
           "model section and execution tape from config.json, tokenizer files as blobs.\n\n"
           "INPUT is a .safetensors file (config.json and tokenizer files beside it are used),\n"
           "a model.safetensors.index.json, a Hugging Face model folder, a tar, tar.gz, tar.zst\n"
           "or zip archive of such a folder, or - (a SafeTensors file or an archive on stdin).\n\n"
           "  -o, --output FILE     write FILE (atomically); - or absent: stdout (not a terminal)\n"
           "      --tokenizer FILE  tokenizer.json (tokenizer_config.json beside it is taken too)\n"
           "                        or a vocab-only GGUF file, replacing the model's tokenizer\n"
           "      --dtype keep|bf16 keep tensor bytes exactly (default) or convert F32/F16 to BF16\n"
           "      --compress none|zstd[:LEVEL]  chunk codec (default none)\n"
           "      --chunk-size SIZE raw bytes per chunk, K/M/G suffixes, multiple of 4K (default 4M)\n"
           "      --threads N       hashing/compression threads (default: all cores)\n"
           "      --progress, --no-progress  progress on stderr (default: when it is a terminal)\n"
           "  -q, --quiet           no warnings or progress\n"
           "  -h, --help            this help\n"
           "  -V, --version         version\n\n"
           "Exit status: 0 packed, 1 bad input or failure (no output left), 2 usage error.\n",
           cli_prog());
}

static int parse_args(int argc, char **argv, pack_options *o)
{
    enum { O_TOK = 256, O_DTYPE, O_COMPRESS, O_CHUNK, O_THREADS, O_PROGRESS, O_NO_PROGRESS };
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'},   {"tokenizer", required_argument, 0, O_TOK},
        {"dtype", required_argument, 0, O_DTYPE}, {"compress", required_argument, 0, O_COMPRESS},
        {"chunk-size", required_argument, 0, O_CHUNK},
        {"threads", required_argument, 0, O_THREADS},
        {"progress", no_argument, 0, O_PROGRESS}, {"no-progress", no_argument, 0, O_NO_PROGRESS},
        {"quiet", no_argument, 0, 'q'},          {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},        {0, 0, 0, 0},
    };
    int c;
    uint64_t size;
    long long n;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:qhV", opts, NULL)) != -1) {
        switch (c) {
        case 'o': o->output = optarg; break;
        case O_TOK: o->tokenizer = optarg; break;
        case O_DTYPE:
            if (strcmp(optarg, "bf16") && strcmp(optarg, "BF16") && strcmp(optarg, "keep"))
                return cli_usage_error("--dtype: '%s' is not keep or bf16", optarg);
            o->to_bf16 = strcmp(optarg, "keep") != 0;
            break;
        case O_COMPRESS:
            if (cli_parse_compress(optarg, &o->writer))
                return cli_usage_error("--compress: '%s' is not none, zstd or zstd:1..22", optarg);
            o->compress = optarg;
            break;
        case O_CHUNK:
            if (cli_parse_size(optarg, &size) || size == 0 || size % 4096 || size > THIN_MAX_CHUNK)
                return cli_usage_error("--chunk-size: '%s' is not a multiple of 4K up to 2G",
                                       optarg);
            o->writer.chunk_size = (size_t)size;
            break;
        case O_THREADS:
            if (cli_parse_int(optarg, 1, 1024, &n))
                return cli_usage_error("--threads: '%s' is not a number from 1 to 1024", optarg);
            o->writer.threads = (unsigned)n;
            break;
        case O_PROGRESS: cli_progress_mode(1); break;
        case O_NO_PROGRESS: cli_progress_mode(0); break;
        case 'q': cli_set_quiet(1); cli_progress_mode(0); break;
        case 'h': usage(); return -1;
        case 'V': printf("thin-pack %s\n", THIN_LIB_VERSION); return -1;
        case ':': return cli_usage_error("option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind + 1 != argc)
        return cli_usage_error(optind == argc ? "no input given" : "more than one input given");
    o->input = argv[optind];
    return 0;
}

int main(int argc, char **argv)
{
    pack_options o;
    memset(&o, 0, sizeof o);
    cli_init(argv[0]);
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc > 0 ? rc : (cli_close_stdout() ? CLI_EXIT_DATA : CLI_EXIT_OK);
    if (!o.output)
        o.output = "-";
    if (strcmp(o.output, "-") == 0 && cli_stdout_is_tty())
        return cli_usage_error("refusing to write a .thin file to a terminal; use -o FILE or a "
                               "pipe");
    rc = pack_run(&o);
    if (strcmp(o.output, "-") == 0 && cli_close_stdout() && rc == 0)
        rc = CLI_EXIT_DATA;
    return rc;
}
