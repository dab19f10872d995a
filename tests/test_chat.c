/*
 * test_chat.c — the --chat prompt: SmolLM3's template for one turn (default thinking, /no_think,
 * a system message, /system_override), ChatML, and template detection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../tools/thin-run/chat.h"

#define HEAD(mode) "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\n" \
                   "Today Date: 16 August 2026\nReasoning Mode: " mode "\n\n## Custom Instructions\n\n"

static char *render(chat_format f, const char *sys, chat_think think, const char *user)
{
    chat_opts o = {f, sys, think, "16 August 2026"};
    char *out, err[128];
    size_t len;
    assert_int_equal(chat_render(&o, user, &out, &len, err, sizeof err), 0);
    assert_int_equal(len, strlen(out));
    return out;
}

static void test_chat_smollm3_no_think_with_system(void **state)
{
    char *s = render(CHAT_FORMAT_SMOLLM3, "SYS", CHAT_THINK_OFF, "USER");
    assert_string_equal(s, HEAD("/no_think") "SYS\n\n\n\n<|im_end|>\n<|im_start|>user\nUSER<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n\n</think>\n");
    free(s);
}

static void test_chat_smollm3_defaults(void **state)
{
    char *s = render(CHAT_FORMAT_SMOLLM3, NULL, CHAT_THINK_DEFAULT, "Hi");
    const char *head = HEAD("/think") "You are a helpful AI assistant named SmolLM, trained by "
                                      "Hugging Face. Your role";
    assert_true(!strncmp(s, head, strlen(head)));
    const char *tail = "the conclusion.\n\n\n\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                       "<|im_start|>assistant\n";
    assert_string_equal(s + strlen(s) - strlen(tail), tail);
    free(s);
    s = render(CHAT_FORMAT_SMOLLM3, NULL, CHAT_THINK_OFF, "Hi");
    assert_string_equal(s, HEAD("/no_think") "You are a helpful AI assistant named SmolLM, trained by "
                           "Hugging Face.\n\n\n\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n\n</think>\n");
    free(s);
}

static void test_chat_smollm3_system_flags(void **state)
{
    /* "/no_think" in the system message wins over the option and is removed */
    char *s = render(CHAT_FORMAT_SMOLLM3, "Be brief. /no_think  ", CHAT_THINK_ON, "Q");
    assert_string_equal(s, HEAD("/no_think") "Be brief.\n\n\n\n<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
                           "<|im_start|>assistant\n<think>\n\n</think>\n");
    free(s);
    /* only a flag: the default persona of that mode */
    s = render(CHAT_FORMAT_SMOLLM3, "/no_think", CHAT_THINK_DEFAULT, "Q");
    assert_non_null(strstr(s, "## Custom Instructions\n\nYou are a helpful AI assistant named SmolLM, "
                              "trained by Hugging Face.\n\n\n\n<|im_end|>"));
    free(s);
    s = render(CHAT_FORMAT_SMOLLM3, "Pirate talk. /system_override", CHAT_THINK_DEFAULT, "Q");
    assert_string_equal(s, "<|im_start|>system\nPirate talk.<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
                           "<|im_start|>assistant\n");
    free(s);
}

static void test_chat_chatml_and_detect(void **state)
{
    char *s = render(CHAT_FORMAT_CHATML, "S", CHAT_THINK_DEFAULT, "U");
    assert_string_equal(s, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                           "<|im_start|>assistant\n");
    free(s);
    assert_int_equal(chat_detect(NULL), CHAT_FORMAT_NONE);
    assert_int_equal(chat_detect("{{ bos_token }}"), CHAT_FORMAT_NONE);
    assert_int_equal(chat_detect("{{'<|im_start|>' + role}}"), CHAT_FORMAT_CHATML);
    assert_int_equal(chat_detect("\"<|im_start|>system\\n\" \"Knowledge Cutoff Date: June 2025\\n\" "
                                 "\"Reasoning Mode: \""), CHAT_FORMAT_SMOLLM3);
    assert_string_equal(chat_stop_text(CHAT_FORMAT_SMOLLM3), "<|im_end|>");
    chat_opts o = {CHAT_FORMAT_NONE, NULL, CHAT_THINK_DEFAULT, NULL};
    char *out, err[128];
    size_t len;
    assert_int_equal(chat_render(&o, "x", &out, &len, err, sizeof err), -1);
    /* the local date is used when none is given */
    o.format = CHAT_FORMAT_SMOLLM3;
    assert_int_equal(chat_render(&o, "x", &out, &len, err, sizeof err), 0);
    assert_non_null(strstr(out, "Today Date: "));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_smollm3_no_think_with_system),
        cmocka_unit_test(test_chat_smollm3_defaults),
        cmocka_unit_test(test_chat_smollm3_system_flags),
        cmocka_unit_test(test_chat_chatml_and_detect),
    };
    return cmocka_run_group_tests_name("chat", tests, NULL, NULL);
}
