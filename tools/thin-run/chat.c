/*
 * chat.c — renders thin-run's --chat prompt (see chat.h for the exact SmolLM3 format).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat.h"

static const char persona_think[] =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an "
    "assistant involves thoroughly exploring questions through a systematic thinking process "
    "before providing the final precise and accurate solutions. This requires engaging in a "
    "comprehensive cycle of analysis, summarizing, exploration, reassessment, reflection, "
    "backtracking, and iteration to develop well-considered thinking process. Please structure "
    "your response into two main sections: Thought and Solution using the specified format: "
    "<think> Thought section </think> Solution section. In the Thought section, detail your "
    "reasoning process in steps. Each step should include detailed considerations such as "
    "analysing questions, summarizing relevant findings, brainstorming new ideas, verifying the "
    "accuracy of the current steps, refining any errors, and revisiting previous steps. In the "
    "Solution section, based on various attempts, explorations, and reflections from the Thought "
    "section, systematically present the final solution that you deem correct. The Solution "
    "section should be logical, accurate, and concise and detail necessary steps needed to reach "
    "the conclusion.\n\n";
static const char persona_plain[] =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face.\n\n";

/* Qwen2.5's default system message, which its template writes when the messages have none. */
static const char qwen25_system[] = "You are Qwen, created by Alibaba Cloud. You are a helpful "
                                    "assistant.";

chat_format chat_detect(const char *tpl)
{
    if (tpl && strstr(tpl, "[INST]") && strstr(tpl, "[/INST]"))
        return CHAT_FORMAT_MISTRAL;
    if (tpl && strstr(tpl, "<start_of_turn>") && strstr(tpl, "<end_of_turn>"))
        return CHAT_FORMAT_GEMMA;
    if (tpl && strstr(tpl, "<|start_header_id|>") && strstr(tpl, "<|eot_id|>"))
        return strstr(tpl, "Cutting Knowledge Date") ? CHAT_FORMAT_LLAMA31 : CHAT_FORMAT_LLAMA3;
    if (!tpl || !strstr(tpl, "<|im_start|>"))
        return CHAT_FORMAT_NONE;
    if (strstr(tpl, "Reasoning Mode") && strstr(tpl, "Knowledge Cutoff Date"))
        return CHAT_FORMAT_SMOLLM3;
    return CHAT_FORMAT_CHATML;
}

void chat_from_template(const char *tpl, chat_opts *o)
{
    o->format = chat_detect(tpl);
    o->default_system = o->format == CHAT_FORMAT_CHATML && strstr(tpl, qwen25_system) ? qwen25_system
                                                                                      : NULL;
    o->fixed_date = o->format == CHAT_FORMAT_LLAMA31 && !strstr(tpl, "strftime_now") &&
                            strstr(tpl, "26 Jul 2024")
                        ? "26 Jul 2024"
                        : NULL;
    o->inst_space = o->format == CHAT_FORMAT_MISTRAL && strstr(tpl, " [/INST]") != NULL;
    o->takes_system = o->format == CHAT_FORMAT_MISTRAL && strstr(tpl, "system_message") != NULL;
    o->system_block = o->format == CHAT_FORMAT_MISTRAL && strstr(tpl, "[SYSTEM_PROMPT]") != NULL;
    o->tpl = tpl;
}

const char *chat_stop_text(chat_format format)
{
    switch (format) {
    case CHAT_FORMAT_CHATML:
    case CHAT_FORMAT_SMOLLM3: return "<|im_end|>";
    case CHAT_FORMAT_LLAMA3:
    case CHAT_FORMAT_LLAMA31: return "<|eot_id|>";
    case CHAT_FORMAT_MISTRAL: return "</s>";
    case CHAT_FORMAT_GEMMA: return "<end_of_turn>";
    default: return NULL;
    }
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t len)
{
    if (b->oom)
        return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

/* Whitespace as Python's str.strip() and str.rstrip() take it for ASCII text (which Jinja's |trim
 * calls): \t \n \v \f \r, space and \x1c-\x1f. */
static int py_space(char c)
{
    return (c >= 0x09 && c <= 0x0D) || c == ' ' || (c >= 0x1C && c <= 0x1F);
}

/* Python's str.replace(word, "") then str.rstrip(). */
static char *remove_and_rstrip(const char *s, const char *const *words, size_t n_words)
{
    char *out = strdup(s);
    if (!out)
        return NULL;
    for (size_t w = 0; w < n_words; w++) {
        size_t wl = strlen(words[w]);
        char *p;
        while ((p = strstr(out, words[w])))
            memmove(p, p + wl, strlen(p + wl) + 1);
    }
    size_t n = strlen(out);
    while (n && py_space(out[n - 1]))
        out[--n] = 0;
    return out;
}

/* The local time now (all fields 0 where it cannot be had). */
static struct tm local_now(void)
{
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm))
        memset(&tm, 0, sizeof tm);
    return tm;
}

/* Today's local date as "DD Month YYYY" (short: "DD Mon YYYY", strftime's "%d %b %Y"). */
static void today_text(char *buf, size_t cap, int short_month)
{
    static const char *const months[12] = {"January", "February", "March", "April", "May",
                                           "June", "July", "August", "September", "October",
                                           "November", "December"};
    const struct tm tm = local_now();
    snprintf(buf, cap, "%02d %.*s %d", tm.tm_mday, short_month ? 3 : 20, months[tm.tm_mon % 12],
             tm.tm_year + 1900);
}

/* The "Today Date" text: the caller's, else the template's fixed one, else today's. */
static void date_text(const chat_opts *o, int short_month, char *buf, size_t cap)
{
    if (o->today || o->fixed_date)
        snprintf(buf, cap, "%s", o->today ? o->today : o->fixed_date);
    else
        today_text(buf, cap, short_month);
}

/* s without leading and trailing whitespace, as Jinja's |trim, appended to b. */
static void sb_trim(sbuf *b, const char *s)
{
    size_t n = strlen(s);
    while (n && py_space(s[n - 1]))
        n--;
    while (n && py_space(*s))
        s++, n--;
    sb_add(b, s, n);
}

/* ---- Mistral v7's default system message: a Jinja expression of string literals and names ---- */

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* The Jinja (Python) string literal at p, unescaped into b; the end past its quote, or NULL. */
static const char *jinja_string(const char *p, sbuf *b)
{
    const char q = *p++;
    for (; *p && *p != q; p++) {
        if (*p != '\\') {
            sb_add(b, p, 1);
            continue;
        }
        char c = *++p, e;
        switch (c) {
        case 'n': e = '\n'; break;
        case 't': e = '\t'; break;
        case 'r': e = '\r'; break;
        case '\\':
        case '\'':
        case '"': e = c; break;
        case 0: return NULL;
        default: sb_add(b, p - 1, 1); e = c; break; /* Python keeps an unknown escape as written */
        }
        sb_add(b, &e, 1);
    }
    return *p == q ? p + 1 : NULL;
}

/* Where the template's "set NAME =" statement puts NAME's value (past the '='), or NULL. */
static const char *jinja_set(const char *tpl, const char *name, size_t name_len)
{
    for (const char *p = strstr(tpl, "set "); p; p = strstr(p + 1, "set ")) {
        const char *n = skip_ws(p + 4);
        if (strncmp(n, name, name_len))
            continue;
        const char *e = skip_ws(n + name_len);
        if (*e == '=' && e[1] != '=')
            return skip_ws(e + 1);
    }
    return NULL;
}

/* NAME's value where the template sets it to strftime_now("FORMAT"), appended to b: o->today
 * where set (tests), else the local time in FORMAT. -1 for any other form. */
static int jinja_date_name(const chat_opts *o, const char *name, size_t name_len, sbuf *b)
{
    const char *v = jinja_set(o->tpl, name, name_len);
    static const char call[] = "strftime_now(";
    if (!v || strncmp(v, call, sizeof call - 1))
        return -1;
    sbuf fmt = {0};
    const char *e = (v[sizeof call - 1] == '"' || v[sizeof call - 1] == '\'')
                        ? jinja_string(v + sizeof call - 1, &fmt)
                        : NULL;
    int rc = -1;
    if (e && *skip_ws(e) == ')' && fmt.p && !fmt.oom) {
        if (o->today)
            sb_str(b, o->today);
        else {
            char buf[128];
            const struct tm tm = local_now();
            sb_add(b, buf, strftime(buf, sizeof buf, fmt.p, &tm));
        }
        rc = 0;
    }
    free(fmt.p);
    return rc;
}

/* The template's default_system_message into b: 1 when it has one, 0 when not, -1 when it is
 * not an expression this reads (string literals and strftime_now names joined by +). */
static int mistral_default_system(const chat_opts *o, sbuf *b)
{
    static const char name[] = "default_system_message";
    const char *p = o->tpl ? jinja_set(o->tpl, name, sizeof name - 1) : NULL;
    if (!p)
        return 0;
    for (;;) {
        if (*p == '"' || *p == '\'') {
            if (!(p = jinja_string(p, b)))
                return -1;
        } else {
            const char *n = p;
            while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
                   (p > n && *p >= '0' && *p <= '9'))
                p++;
            if (p == n || jinja_date_name(o, n, (size_t)(p - n), b))
                return -1;
        }
        p = skip_ws(p);
        if (*p == '%' || (*p == '-' && p[1] == '%'))
            return 1;
        if (*p != '+')
            return -1;
        p = skip_ws(p + 1);
    }
}

/* Mistral's [INST] formats (see chat.h). */
static int mistral_render(sbuf *b, const chat_opts *o, const char *user, char *err, size_t errlen)
{
    sb_str(b, "<s>");
    if (o->system_block) { /* the given system message, else the template's default, if any */
        sbuf d = {0};
        const int rc = o->system ? 1 : mistral_default_system(o, &d);
        if (rc < 0 || d.oom) {
            free(d.p);
            if (err && errlen)
                snprintf(err, errlen, "%s", rc < 0 ? "the chat template's default system message "
                                                     "is not plain text (--system gives one)"
                                                   : "out of memory");
            return -1;
        }
        if (rc > 0) {
            sb_str(b, "[SYSTEM_PROMPT]");
            sb_str(b, o->system ? o->system : d.p ? d.p : "");
            sb_str(b, "[/SYSTEM_PROMPT]");
        }
        free(d.p);
        sb_str(b, "[INST]");
        sb_str(b, user ? user : "");
        sb_str(b, "[/INST]");
        return 0;
    }
    sb_str(b, "[INST] ");
    if (o->system) {
        sb_str(b, o->system);
        sb_str(b, "\n\n");
    }
    sb_str(b, user ? user : "");
    sb_str(b, o->inst_space ? " [/INST]" : "[/INST]");
    return 0;
}

/* Llama 3's header format (see chat.h). */
static void llama3_render(sbuf *b, const chat_opts *o, const char *user)
{
    sb_str(b, "<|begin_of_text|>");
    if (o->format == CHAT_FORMAT_LLAMA31 || o->system) {
        sb_str(b, "<|start_header_id|>system<|end_header_id|>\n\n");
        if (o->format == CHAT_FORMAT_LLAMA31) {
            char date[64];
            date_text(o, 1, date, sizeof date);
            sb_str(b, "Cutting Knowledge Date: December 2023\nToday Date: ");
            sb_str(b, date);
            sb_str(b, "\n\n");
        }
        if (o->system)
            sb_trim(b, o->system);
        sb_str(b, "<|eot_id|>");
    }
    sb_str(b, "<|start_header_id|>user<|end_header_id|>\n\n");
    sb_trim(b, user ? user : "");
    sb_str(b, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* SmolLM3's system block; *think receives the reasoning mode it settles on. */
static void smollm3_system(sbuf *b, const chat_opts *o, int *think)
{
    static const char *const modes[] = {"/no_think", "/think"};
    static const char *const override[] = {"/system_override"};
    char date[64];
    char *custom = NULL;
    *think = o->think != CHAT_THINK_OFF;
    if (o->system) {
        if (strstr(o->system, "/no_think"))
            *think = 0;
        else if (strstr(o->system, "/think"))
            *think = 1;
        if (!(custom = remove_and_rstrip(o->system, modes, 2))) {
            b->oom = 1;
            return;
        }
    }
    sb_str(b, "<|im_start|>system\n");
    if (o->system && strstr(o->system, "/system_override")) {
        char *text = remove_and_rstrip(custom, override, 1);
        if (!text)
            b->oom = 1;
        else
            sb_str(b, text);
        free(text);
        free(custom);
        sb_str(b, "<|im_end|>\n");
        return;
    }
    date_text(o, 0, date, sizeof date);
    sb_str(b, "## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: ");
    sb_str(b, date);
    sb_str(b, "\nReasoning Mode: ");
    sb_str(b, *think ? "/think" : "/no_think");
    sb_str(b, "\n\n## Custom Instructions\n\n");
    if (custom && *custom) {
        sb_str(b, custom);
        sb_str(b, "\n\n");
    } else
        sb_str(b, *think ? persona_think : persona_plain);
    sb_str(b, "\n\n<|im_end|>\n");
    free(custom);
}

int chat_render(const chat_opts *o, const char *user, char **out, size_t *len, char *err,
                size_t errlen)
{
    sbuf b = {0};
    int think = 0;
    *out = NULL;
    *len = 0;
    if (o->format < CHAT_FORMAT_CHATML || o->format > CHAT_FORMAT_GEMMA) {
        if (err && errlen)
            snprintf(err, errlen,
                     "no supported chat template (need SmolLM3, ChatML, Llama 3, Mistral or Gemma)");
        return -1;
    }
    if (o->format == CHAT_FORMAT_MISTRAL && o->system && !o->takes_system && !o->system_block) {
        if (err && errlen)
            snprintf(err, errlen, "this chat template takes no system message");
        return -1;
    }
    if (o->format == CHAT_FORMAT_GEMMA) {
        sb_str(&b, "<bos><start_of_turn>user\n");
        if (o->system) {
            sb_str(&b, o->system);
            sb_str(&b, "\n\n");
        }
        sb_trim(&b, user ? user : "");
        sb_str(&b, "<end_of_turn>\n<start_of_turn>model\n");
    } else if (o->format == CHAT_FORMAT_MISTRAL) {
        if (mistral_render(&b, o, user, err, errlen)) {
            free(b.p);
            return -1;
        }
    } else if (o->format == CHAT_FORMAT_LLAMA3 || o->format == CHAT_FORMAT_LLAMA31) {
        llama3_render(&b, o, user);
    } else {
        const char *sys = o->system ? o->system : o->default_system;
        if (o->format == CHAT_FORMAT_SMOLLM3)
            smollm3_system(&b, o, &think);
        else if (sys) {
            sb_str(&b, "<|im_start|>system\n");
            sb_str(&b, sys);
            sb_str(&b, "<|im_end|>\n");
        }
        sb_str(&b, "<|im_start|>user\n");
        sb_str(&b, user ? user : "");
        sb_str(&b, "<|im_end|>\n<|im_start|>assistant\n");
        if (o->format == CHAT_FORMAT_SMOLLM3 && !think)
            sb_str(&b, "<think>\n\n</think>\n");
    }
    if (b.oom || !b.p) {
        free(b.p);
        if (err && errlen)
            snprintf(err, errlen, "out of memory");
        return -1;
    }
    *out = b.p;
    *len = b.n;
    return 0;
}
