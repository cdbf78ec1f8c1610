"""The C++ tokenizer keeps code, strings and directives apart and drops comments."""

from worker.engine.policy.cuda_tokens import directive_body_tokens, include_target, tokenize


def kinds_and_texts(text):
    return [(t.kind, t.text) for t in tokenize(text)]


def test_comments_are_dropped_and_lines_counted():
    tokens = tokenize("a // system(\n/* fopen(\n x */ b")
    assert [(t.text, t.line) for t in tokens] == [("a", 0), ("b", 2)]


def test_strings_chars_and_raw_strings_are_single_tokens():
    tokens = tokenize('f("x // not a comment", \'"\', R"delim(sys)tem( ")delim")')
    strings = [t for t in tokens if t.kind in ("string", "char")]
    assert [t.value for t in strings] == ["x // not a comment", '"', 'sys)tem( "']
    assert [t.text for t in tokens if t.kind == "ident"] == ["f"]


def test_directives_with_continuations_and_define_bodies():
    tokens = tokenize('#include <cublas_v2.h> // vendor\n#define RUN(x) \\\n  system(x)\nint y;')
    directives = [t for t in tokens if t.kind == "directive"]
    assert include_target(directives[0]) == "cublas_v2.h"
    assert [t.text for t in directive_body_tokens(directives[1])] == ["RUN", "(", "x", ")", "system", "(", "x", ")"]
    assert tokens[-3].text == "int" and tokens[-3].line == 3


def test_multi_character_punctuation():
    assert [t.text for t in tokenize("at::mm<<<1, 2>>>(p->x)")] == [
        "at", "::", "mm", "<<<", "1", ",", "2", ">>>", "(", "p", "->", "x", ")",
    ]
