from wrap import dedent, indent


def test_indent_all_lines():
    assert indent("a\nb\n", "> ") == "> a\n> b\n"


def test_indent_skips_blank():
    assert indent("a\n\nb", "  ") == "  a\n\n  b"


def test_indent_blank_when_asked():
    assert indent("a\n\nb", "# ", only_nonblank=False) == "# a\n# \n# b"


def test_indent_no_trailing_newline():
    assert indent("x", "-") == "-x"


def test_dedent_common():
    assert dedent("    a\n    b\n") == "a\nb\n"


def test_dedent_partial():
    assert dedent("    a\n      b\n") == "a\n  b\n"


def test_dedent_ignores_blank_lines():
    assert dedent("  a\n\n  b") == "a\n\nb"


def test_dedent_whitespace_only_line_emptied():
    assert dedent("  a\n     \n  b") == "a\n\nb"


def test_dedent_no_common():
    assert dedent("a\n  b") == "a\n  b"


def test_dedent_mixed_tabs_spaces():
    assert dedent("\t a\n\t b") == "a\nb"


def test_dedent_tab_vs_space_no_common():
    assert dedent("\ta\n b") == "\ta\n b"


def test_dedent_empty():
    assert dedent("") == ""
