/*
 * tok_private.h — the tokenizer's internal state, shared by its modules (not a public header).
 *
 * One struct tok serves both model types. Vocabulary keys are stored in the form the encoder
 * matches against: SentencePiece pieces as written ("▁the"), byte-level pieces already mapped
 * back to raw bytes ("Ġthe" is stored as " the"), so the byte-level encoder never builds the
 * GPT-2 unicode form of the input.
 */
#ifndef THIN_TOK_PRIVATE_H
#define THIN_TOK_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "tokenizer.h"

/* Token attributes (values follow GGUF's tokenizer.ggml.token_type). */
enum tok_attr {
    TOK_ATTR_MISSING = 0,  /* id with no token (gap in a tokenizer.json vocab) */
    TOK_ATTR_NORMAL = 1,
    TOK_ATTR_UNKNOWN = 2,
    TOK_ATTR_CONTROL = 3,  /* special: matched only with parse_special, decodes to nothing */
    TOK_ATTR_USER = 4,     /* user-defined added token: always matched literally */
    TOK_ATTR_UNUSED = 5,
    TOK_ATTR_BYTE = 6,     /* <0xNN> byte-fallback piece */
};

/* Limits that keep hostile inputs from asking for absurd allocations. */
#define TOK_MAX_VOCAB  (1u << 22)
#define TOK_MAX_MERGES (1u << 23)
#define TOK_MAX_PIECE  (1u << 16)
#define TOK_MAX_NORM_OPS 32
#define TOK_MAX_SPLITS 8

/* Open-addressing map from a byte string to a token id. Keys point into the tok's arena; a slot
 * holds the key's place and the upper half of its hash, so that a probe reads one slot and, only
 * where the hash half and the length agree, the key's bytes. */
typedef struct tok_strslot {
    uint32_t id1;     /* id + 1, 0 = empty */
    uint32_t tag;     /* upper 32 bits of the key's hash */
    uint32_t key_off, key_len;
} tok_strslot;
typedef struct tok_strmap {
    tok_strslot *slots; /* (cap) */
    uint32_t cap;     /* power of two */
} tok_strmap;

/* Open-addressing map from a pair of ids to (rank, merged id), each entry in one slot. */
typedef struct tok_pairslot {
    uint64_t key;     /* (left << 32 | right) + 1, 0 = empty */
    int32_t rank;     /* merge rank, lower merges first */
    int32_t merged;   /* id of left+right */
} tok_pairslot;
typedef struct tok_pairmap {
    tok_pairslot *slots; /* (cap) */
    uint32_t cap, n;
} tok_pairmap;

typedef struct tok_token {
    uint32_t key_off, key_len;     /* matching form of the token in the arena */
    uint32_t piece_off, piece_len; /* decoded bytes in the arena */
    float score;                   /* SentencePiece score (scores mode) */
    uint8_t attr;                  /* enum tok_attr */
    uint8_t lstrip, rstrip;        /* added-token whitespace stripping */
} tok_token;

/* One step of the normalizer program applied to each text segment. */
typedef enum tok_norm_kind {
    TOK_NORM_REPLACE_STR = 1,  /* replace every occurrence of a literal */
    TOK_NORM_REPLACE_RE = 2,   /* replace every match of a PCRE2 pattern */
    TOK_NORM_PREPEND = 3,      /* prepend a string to a non-empty segment */
    TOK_NORM_UNICODE = 4,      /* Unicode normalization form (uform): NFC, NFD, NFKC, NFKD */
} tok_norm_kind;

/* Unicode normalization forms of TOK_NORM_UNICODE. */
typedef enum tok_uform { TOK_NFC = 1, TOK_NFD, TOK_NFKC, TOK_NFKD } tok_uform;

typedef struct tok_norm_op {
    tok_norm_kind kind;
    char *pattern;       /* literal or regex source, NUL-terminated */
    size_t pattern_len;
    char *content;       /* replacement / prepended text */
    size_t content_len;
    void *code;          /* pcre2_code_8 * for TOK_NORM_REPLACE_RE */
    tok_uform uform;     /* TOK_NORM_UNICODE */
    uint8_t first_only;  /* TOK_NORM_PREPEND: only to the segment at the start of the text */
} tok_norm_op;

/* How the model part turns symbols into merge candidates. */
typedef enum tok_merge_mode {
    TOK_MERGE_RANKS = 1,   /* pair table (tokenizer.json merges, GGUF merges) */
    TOK_MERGE_SCORES = 2,  /* concatenation in vocab, highest score first (GGUF llama) */
} tok_merge_mode;

struct tok {
    tok_kind kind;
    tok_merge_mode mode;
    uint32_t n_vocab;
    tok_token *tokens;        /* (n_vocab) */
    char *arena;              /* keys and pieces, each NUL-terminated */
    size_t arena_len, arena_cap;
    tok_strmap map;           /* key -> id over matchable tokens */
    tok_pairmap pairs;        /* merge table (TOK_MERGE_RANKS) */
    int32_t byte_id[256];     /* <0xNN> pieces (SPM) or single-byte tokens (byte-level); -1 */
    int32_t bos, eos, unk;
    int add_bos;
    int byte_fallback, fuse_unk, ignore_merges;
    uint32_t strip_lead;      /* leading spaces the decoder strips from the output start */
    /* added tokens matched literally before the model, sorted by first byte */
    int32_t *added;           /* (n_added) ids, by first byte, longest first */
    uint32_t n_added;
    uint32_t added_start[257];/* added[added_start[b] .. added_start[b+1]) start with byte b */
    size_t max_piece;         /* longest decoded piece */
    /* normalizer program (SPM) */
    tok_norm_op norm[TOK_MAX_NORM_OPS];
    uint32_t n_norm;
    /* pre-tokenizer: regex splits (Isolated) applied in order, then byte-level mapping */
    void *split[TOK_MAX_SPLITS];  /* pcre2_code_8 * */
    uint32_t n_split;
    char *chat_template;      /* from tokenizer_config.json or GGUF, NUL-terminated; may be NULL */
};


/* ---- construction (tokenizer.c) ---- */
tok *tok_alloc(tok_kind kind, uint32_t n_vocab);
/* Appends bytes + NUL to the arena; *off receives their offset. Returns 0 or -1 (no memory). */
int tok_arena_add(tok *t, const void *bytes, size_t len, uint32_t *off);
/* Sets a token's matching key and decoded piece (both copied). */
int tok_set_token(tok *t, uint32_t id, const char *key, size_t key_len, const char *piece,
                  size_t piece_len, uint8_t attr);
/* Sets a token from its vocabulary text, deriving key and piece for the tokenizer kind
 * (byte-level text mapped back to bytes, "▁" to space, <0xNN> to the byte when attr is BYTE).
 * Returns 0, or -1 with a message (bad byte piece, no memory). */
int tok_set_token_text(tok *t, uint32_t id, const char *text, size_t len, uint8_t attr,
                       char *err, size_t errlen);
/* Builds the key map, byte table and added-token list once every token is set. */
int tok_finish(tok *t, char *err, size_t errlen);
/* Adds merge (left, right), both in vocabulary text form, with the given rank; ignores pairs whose
 * parts or concatenation are not tokens (they could never fire). Returns 0, or -1 (no memory). */
int tok_add_merge(tok *t, const char *left, size_t left_len, const char *right, size_t right_len,
                  int32_t rank);
/* Adds merge "left right" given as one string split at its first space after the first byte. */
int tok_add_merge_line(tok *t, const char *line, size_t len, int32_t rank);
const char *tok_key(const tok *t, int32_t id, size_t *len);
/* Parses "<0xNN>" (exactly, hex digits upper or lower case); returns the byte or -1. */
int tok_parse_byte_piece(const char *s, size_t len);

/* ---- maps (tok_map.c) ---- */
int tok_strmap_build(tok_strmap *m, const tok *t);
int32_t tok_strmap_get(const tok_strmap *m, const tok *t, const char *s, size_t len);
void tok_strmap_free(tok_strmap *m);
int tok_pairmap_init(tok_pairmap *m, uint32_t n_expected);
/* Inserts unless present (the first, lowest rank wins). */
void tok_pairmap_put(tok_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t merged);
int tok_pairmap_get(const tok_pairmap *m, int32_t left, int32_t right, int32_t *rank,
                    int32_t *merged);
void tok_pairmap_free(tok_pairmap *m);

/* ---- UTF-8 and the GPT-2 byte map (tok_utf8.c) ---- */
/* Length of the UTF-8 sequence starting at s (1..4) if valid and complete within n, else 0. */
size_t tok_utf8_valid_len(const unsigned char *s, size_t n);
/* Sequence length announced by a lead byte (1 for invalid leads, like llama.cpp's utf8_len). */
size_t tok_utf8_lead_len(unsigned char c);
/* Decodes GPT-2 byte-level text (each char one byte) into raw bytes. Returns the byte count, or
 * -1 when a char is outside the map (the caller keeps the text as is). out holds len bytes. */
long tok_bytelevel_decode(const char *s, size_t len, char *out);
/* Encodes one raw byte as its GPT-2 char in UTF-8 (1 or 2 bytes); returns the length. */
size_t tok_bytelevel_char(unsigned char b, char out[2]);

/* ---- normalizer and pre-tokenizer (tok_norm.c) ---- */
/* Compiles a pattern (UTF, UCP, invalid UTF tolerated, JIT when available). */
void *tok_regex_compile(const char *pat, size_t len, char *err, size_t errlen);
void tok_regex_free(void *code);
/* Applies the normalizer program to one segment. *out is malloc'd. */
/* first: the segment starts the text (no added token before it). */
int tok_normalize(const tok *t, const char *s, size_t len, int first, char **out, size_t *out_len);
/* Calls fn for each piece of the pre-tokenized segment (regex splits, Isolated behaviour). */
typedef int (*tok_piece_fn)(void *ctx, const char *s, size_t len);
int tok_pretokenize(const tok *t, const char *s, size_t len, tok_piece_fn fn, void *ctx);
/* The pattern of Llama-3's pre-tokenizer and of GPT-2's. */
extern const char tok_re_llama3[];
extern const char tok_re_gpt2[];

/* ---- model (tok_bpe.c) ---- */
/* Output buffer of ids. */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;
int tok_ids_push(tok_ids *o, int32_t id);
/* Runs BPE on one word (already normalized / pre-tokenized) and appends its ids. */
int tok_bpe_word(const tok *t, const char *s, size_t len, tok_ids *out);

#endif /* THIN_TOK_PRIVATE_H */
