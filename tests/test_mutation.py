"""Mutants apply to the reference's code exactly as written, and the bundled mistakes are real
ones. `strip_prose` removes comments and docstrings and keeps every other character."""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize

import pytest

from graders.dense.mistakes import MISTAKES
from tests.grading import grade
from graders.shared.mutation import PAGED_REFERENCE, REFERENCE, Mutant, MutationError, strip_prose

DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)  # docstring holders


def strip(source: str) -> str:
    return strip_prose(textwrap.dedent(source))


def test_an_edit_that_does_not_match_exactly_once_is_an_error():
    with pytest.raises(MutationError):
        Mutant(
            "ghost", "edits text the reference does not have", replace=(("no such text", ""),)
        ).source()


def test_an_edit_anchored_on_a_comment_is_an_error():
    anchor = "past_end = torch.arange(keys.shape[2], device=keys.device) >= cache.lengths[:, None]"
    assert anchor + "  # [B, T]" in REFERENCE.read_text(), "the reference has this comment"
    with pytest.raises(MutationError):
        Mutant("prose", "anchored on the comment", replace=((anchor + "  # [B, T]", ""),)).source()
    assert Mutant("code", "anchored on the code", replace=((anchor, anchor),)).source()


def test_a_statement_edit_matches_the_syntax_whatever_the_layout(tmp_path):
    base = tmp_path / "kv_cache.py"
    base.write_text("def f(a, b):\n    x = (a +  # a comment\n         b)\n    return x * 2\n")
    edit = Mutant("minus", "", statements=(("x = a + b", "x = a - b"),), base=base)
    assert edit.source() == "def f(a, b):\n    x = a - b\n    return x * 2\n"
    removal = Mutant("gone", "", statements=(("x = a + b\nreturn x * 2", ""),), base=base)
    assert removal.source() == "def f(a, b):\n    pass\n"
    for absent in ("x = a - b", "return x"):
        with pytest.raises(MutationError, match="occur 0 times"):
            Mutant("ghost", "", statements=((absent, ""),), base=base).source()


def test_a_statement_edit_that_matches_twice_is_an_error(tmp_path):
    base = tmp_path / "kv_cache.py"
    base.write_text("x = 1\nif x:\n    x = 1\n")
    with pytest.raises(MutationError, match="occur 2 times"):
        Mutant("twice", "", statements=(("x = 1", "x = 2"),), base=base).source()


def test_a_function_swap_replaces_the_whole_definition():
    source = Mutant("swap", "", functions={"reset": "def reset(cache):\n    pass\n"}).source()
    assert "def reset(cache):\n    pass\n" in source
    assert source.count("def reset(") == 1
    compile(source, "mutant", "exec")


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_every_bundled_mistake_differs_from_the_reference_and_fails_prefix_equivalence(
    mistake, tmp_path
):
    source = mistake.source()
    assert source != strip_prose(REFERENCE.read_text())
    path = tmp_path / "kv_cache.py"
    path.write_text(source)
    (item,) = grade(path, only={"prefix-equivalence"}).items
    assert item.status != "pass", f"{mistake.name} is not caught by prefix-equivalence"


def test_comments_go_with_the_spaces_before_them_and_their_own_lines():
    assert (
        strip("""
        x = 1  # one
        # a line of its own
            # indented, after code
        y = [  # open
            2,  # two
        ]
    """)
        == "\nx = 1\ny = [\n    2,\n]\n"
    )


@pytest.mark.parametrize(
    "source, expected",
    [
        ('"""Module."""\nimport math\n', "import math\n"),
        ('class A:\n    """Class."""\n\n    x = 1\n', "class A:\n\n    x = 1\n"),
        (
            'def f():\n    """Function.\n\n    More.\n    """\n    return 1\n',
            "def f():\n    return 1\n",
        ),
        ('async def f():\n    """Async."""\n    return 1\n', "async def f():\n    return 1\n"),
        (
            'class A:\n    def f(self):\n        """Method."""\n        return 1\n',
            "class A:\n    def f(self):\n        return 1\n",
        ),
        (
            "def f():\n    '''Single quotes.''' 'concatenated'\n    return 1\n",
            "def f():\n    return 1\n",
        ),
    ],
    ids=["module", "class", "function", "async-function", "method", "implicit-concatenation"],
)
def test_docstrings_go(source, expected):
    assert strip_prose(source) == expected


@pytest.mark.parametrize(
    "source, expected",
    [
        (
            'class Full(RuntimeError):\n    """Only a docstring."""\n',
            "class Full(RuntimeError):\n    pass\n",
        ),
        ('def f():\n    """Only a docstring."""  # and a comment\n', "def f():\n    pass\n"),
        ('class Café: """On the line of its def, after non-ASCII."""\n', "class Café: pass\n"),
    ],
    ids=["class", "function-with-comment", "same-line-non-ascii"],
)
def test_a_docstring_that_is_the_whole_body_becomes_pass(source, expected):
    assert strip_prose(source) == expected
    compile(strip_prose(source), "stripped", "exec")


def test_strings_that_are_not_docstrings_stay():
    source = textwrap.dedent('''\
        x = 1
        """A string after the first statement."""
        def f():
            y = "a value"
            """A second string statement."""
            return y
        def g():
            return 1
            """After the first statement."""
    ''')
    assert strip_prose(source) == source


def test_a_hash_inside_a_string_is_not_a_comment():
    code = 's = "# not a comment"\nt = f"{s}#{s}"\nu = """\n# still a string\n"""\n'
    assert strip_prose(code.replace("\n", "  # a comment\n", 1)) == code


def test_code_lines_and_blank_lines_stay_as_written():
    source = textwrap.dedent('''\
        def f(a,
              b):   # odd spacing kept
            """Doc."""

            total = (a +
                     b)  # continued

            return  total
    ''')
    assert strip_prose(source) == textwrap.dedent("""\
        def f(a,
              b):

            total = (a +
                     b)

            return  total
    """)


@pytest.mark.parametrize("path", [REFERENCE, PAGED_REFERENCE], ids=lambda p: p.name)
def test_the_references_without_prose_have_none_and_are_the_same_code(path):
    text = path.read_text()
    stripped = strip_prose(text)
    tokens = list(tokenize.generate_tokens(io.StringIO(stripped).readline))
    assert not [t for t in tokens if t.type == tokenize.COMMENT], "a comment is left"
    documented = [
        getattr(n, "name", "the module")
        for n in ast.walk(ast.parse(stripped))
        if isinstance(n, DOCUMENTED) and ast.get_docstring(n) is not None
    ]
    assert not documented, f"docstrings left in {documented}"
    assert ast.dump(_without_docstrings(ast.parse(text))) == ast.dump(ast.parse(stripped)), (
        "the code changed"
    )
    assert strip_prose(stripped) == stripped, "stripping twice changes more"


def _without_docstrings(tree: ast.Module) -> ast.Module:
    """`tree` with each docstring dropped, or replaced by `pass` when it is the whole body."""
    for node in ast.walk(tree):
        if isinstance(node, DOCUMENTED) and ast.get_docstring(node) is not None:
            node.body = node.body[1:] or [ast.Pass()]
    return tree
