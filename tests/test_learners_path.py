"""The learner's path: the solutions read as a tree of small diffs, and what their prose claims
is what their code does.

- Claims: every figure a solution's docstring or solutions/README.md quotes is recomputed here,
  from the code (int8's memory ratio, the copies a paged step makes, the pad value of the model
  tests, the size of a float32 copy of K at the bench's shape) or from the measured table of
  solutions/README.md (the bench ratios), and must read the same.
- The tree: `kata solution --diff A B` prints the diff of any two steps (plain to a pipe,
  coloured in a terminal); concat to preallocated changes only a few lines of code, the fused
  step is the preallocated file with attend's math swapped, a file that grades, and the
  speculative step (kv_cache.py) is the preallocated file (kv_cache_l6.py) with section 8 added.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import io
import math
import re
from pathlib import Path

import pytest
import torch
from rich.console import Console
from torch.utils._python_dispatch import TorchDispatchMode
from typer.testing import CliRunner

import cli
from benchmarks import attention_steps
from benchmarks.subjects import SHAPES
from graders.shared.mutation import strip_prose
from graders.workflows import solutions

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
README = SOLUTIONS / "README.md"
runner = CliRunner()


def load(name: str):
    """solutions/NAME.py as a module of its own (the solutions are files, not a package)."""
    spec = importlib.util.spec_from_file_location(f"learners_path_{name}", SOLUTIONS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def flat(text: str) -> str:
    """`text` with every run of whitespace (line breaks, indentation) made one space."""
    return " ".join(text.split())


# --- claims recomputed from the code ------------------------------------------------------------


def test_the_pad_value_the_readme_names_is_the_one_the_model_tests_pad_with():
    (named,) = re.findall(r"ragged rows with (\S+) padding", flat(README.read_text()))
    tree = ast.parse((SOLUTIONS / "test_kv_cache.py").read_text())
    test = next(
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and node.name == "test_ragged_rows_attend_only_to_their_own_positions"
    )
    pads = [
        eval(compile(ast.Expression(node.value), "pad", "eval"), {"float": float})  # noqa: S307
        for node in ast.walk(test)
        if isinstance(node, ast.Assign)
        and all(
            isinstance(target, ast.Subscript)
            and isinstance(target.value, ast.Name)
            and target.value.id in ("k", "v")
            for target in node.targets
        )
    ]
    assert pads, "the ragged test writes its padding into k and v"
    for pad in pads:
        assert math.isnan(pad) if math.isnan(float(named)) else pad == float(named), (named, pad)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_int8_holds_the_quoted_multiple_of_float32_tokens(head_dim):
    paged = load("paged_kv_cache")
    pools = {
        q: paged.PagedKVCache(4, 16, 2, head_dim, quantize=q).pool_bytes for q in (None, "int8")
    }
    ratio = pools[None] / pools["int8"]
    assert ratio == pytest.approx(4 * head_dim / (head_dim + 4))  # the formula both texts give
    quoted = f"{ratio:.1f}x for head_dim {head_dim}"
    docstring = flat(ast.get_docstring(ast.parse((SOLUTIONS / "paged_kv_cache.py").read_text())))
    assert "4D / (D + 4)" in docstring and quoted in docstring
    readme = flat(README.read_text())
    assert "4D / (D + 4)" in readme and f"{ratio:.1f}x for" in readme


class _Writes(TorchDispatchMode):
    """The ops that write a new tensor of at least `size` elements (views and the in-place
    zeroing of a few stale slots are not copies)."""

    def __init__(self, size: int):
        super().__init__()
        self.size, self.ops = size, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (
            isinstance(out, torch.Tensor)
            and out.numel() >= self.size
            and not func.is_view
            and func.__name__ != "index_put_.default"
        ):
            self.ops.append(func.__name__.split(".")[0])
        return out


@pytest.mark.parametrize(
    "dtype, quantize, copies",
    [
        (torch.float32, None, ["index_select"]),
        (torch.bfloat16, None, ["index_select", "copy_"]),
        (torch.float16, None, ["index_select", "copy_"]),
        (torch.float32, "int8", ["index_select", "copy_", "mul_"]),
    ],
    ids=["float32", "bf16", "fp16", "int8"],
)
def test_a_paged_step_copies_k_and_v_once_for_a_float32_pool(dtype, quantize, copies):
    """solutions/README.md: a float32 pool's K and V are copied once per step, a bf16, fp16 or
    int8 pool's twice (gathered, then upcast; int8 is then scaled in place)."""
    paged = load("paged_kv_cache")
    cache = paged.PagedKVCache(16, 4, 2, 8, dtype=dtype, quantize=quantize)
    for seq, length in enumerate((7, 8)):
        cache.add(seq)
        cache.append(seq, torch.randn(2, length, 8).to(dtype), torch.randn(2, length, 8).to(dtype))
    query = torch.randn(2, 2, 1, 8).to(dtype)
    cache.attend([0, 1], query)  # the scratch buffers exist from here on
    with _Writes(size=2 * 2 * 2 * 4 * 8) as writes:  # N * W * Hkv * block_size * D, gathered
        cache.attend([0, 1], query)
    assert writes.ops == copies * 2, "the same copies for K, then for V"
    readme = flat(README.read_text())
    assert "A float32 pool's K and V are copied once per step" in readme
    assert "a bf16, fp16 or int8 pool's twice" in readme


def test_fp16_scores_overflow_where_the_float32_scores_of_attend_do_not():
    """kv_cache.py: in fp16, q·k itself overflows past 65504; the softmax never does."""
    assert "q·k itself overflows past 65504" in flat((SOLUTIONS / "kv_cache.py").read_text())
    solution = load("kv_cache")
    gen = torch.Generator().manual_seed(0)
    keys = torch.randn(1, 1, 6, 64, generator=gen) * 40
    values = torch.randn(1, 1, 6, 64, generator=gen)
    keys, values = keys.half(), values.half()
    query = keys[:, :, -1:].clone()  # q·k about 64 * 40² = 102400 for the last position
    assert torch.isinf(query @ keys.transpose(-1, -2)).any(), "fp16 scores overflow"
    cache = solution.KVCache()
    solution.append(cache, keys, values)
    out = solution.attend(cache, query)
    scores = query.double() @ keys.double().transpose(-1, -2) / math.sqrt(64)
    expected = torch.softmax(scores, dim=-1) @ values.double()
    assert torch.isfinite(out).all()
    assert (out.double() - expected).abs().max() < 1e-2


def test_the_float32_copy_of_k_is_64_mib_at_the_bench_shape():
    shape = SHAPES["mha"]
    key_bytes = shape.batch * shape.kv_heads * 16384 * shape.head_dim * 4  # float32, T=16384
    assert key_bytes == 64 * 2**20
    readme = flat(README.read_text())
    assert "a 64 MiB allocation a step at T=16384" in readme
    assert "At T=16384 K and V are 128 MiB (float32)" in readme
    assert "head_dim 128" in flat((SOLUTIONS / "kv_cache.py").read_text())


def bench_table() -> dict[tuple[str, str], dict[str, float]]:
    """solutions/README.md's table at T=16384: (subject, column) -> ms, bare, read, static."""
    lines = README.read_text().split("At T=16384, ms per step", 1)[1].splitlines()
    rows = [line.strip("|").split("|") for line in lines if line.startswith("|")]
    header, body = [cell.strip() for cell in rows[0]], rows[2:]
    table = {}
    for row in body:
        for column, cell in zip(header[1:], row[1:]):
            ms, ratios = cell.split(":")
            bare, read, static = (float(r) for r in ratios.split("/"))
            table[(row[0].strip(), column)] = {
                "ms": float(ms),
                "bare": bare,
                "read": read,
                "static": static,
            }
    return table


def bare(subject: str, column: str = "MHA fp32"):
    """The figure `× bare attention` of `subject` in `column` of the table."""
    return lambda table: table[(subject, column)]["bare"]


def read(subject: str, column: str = "MHA fp32"):
    """The figure `× pure read` of `subject` in `column` of the table."""
    return lambda table: table[(subject, column)]["read"]


def faster(slow: str, fast: str, column: str = "MHA fp32"):
    """How many times fewer ms a step `fast` takes than `slow`, in `column`."""
    return lambda table: table[(slow, column)]["ms"] / table[(fast, column)]["ms"]


def both(*figures):
    return lambda table: tuple(figure(table) for figure in figures)


# (file, the phrase it quotes, the figures in the phrase, computed from the table)
QUOTED = [
    ("solutions/kv_cache.py", "{:.2f}x bare attention on contiguous K and V", bare("preallocated")),
    (
        "solutions/kv_cache.py",
        "{:.1f}x faster than transformers' StaticCache",
        faster("HF StaticCache", "preallocated"),
    ),
    (
        "solutions/kv_cache.py",
        "about {:.0f}x the pure read at T=16384",
        read("preallocated", "MHA bf16"),
    ),
    ("solutions/concat_kv_cache.py", "T=16384: {:.1f}x bare attention", bare("concat")),
    ("solutions/concat_kv_cache.py", "{:.1f}x with GQA", bare("concat", "GQA 32/8 fp32")),
    ("solutions/README.md", "Correct, L5: {:.1f}x bare attention", bare("concat")),
    (
        "solutions/README.md",
        "{:.2f}x bare attention ({:.0f}x faster than concat)",
        both(bare("preallocated"), faster("concat", "preallocated")),
    ),
    (
        "solutions/README.md",
        "GQA 32/8, {:.2f}x against concat's {:.1f}x",
        both(bare("preallocated", "GQA 32/8 fp32"), bare("concat", "GQA 32/8 fp32")),
    ),
    ("solutions/README.md", "a gather a step: {:.2f}x bare", bare("paged")),
    (
        "solutions/README.md",
        "K: {:.2f}x the pure read, against {:.1f}x",
        both(read("fused", "MHA bf16"), read("preallocated", "MHA bf16")),
    ),
    ("README.md", "Correct, L5: {:.1f}x bare attention", bare("concat")),
    ("README.md", "copies of K and V. {:.2f}x bare attention", bare("preallocated")),
    ("README.md", "a gather a step: {:.2f}x bare", bare("paged")),
    (
        "README.md",
        "K: {:.2f}x the pure read, not {:.1f}x",
        both(read("fused", "MHA bf16"), read("preallocated", "MHA bf16")),
    ),
    (
        "README.md",
        "the cache: {:.2f}x the pure read, not {:.1f}x",
        both(read("tiled", "MHA bf16"), read("preallocated", "MHA bf16")),
    ),
    (
        "solutions/README.md",
        "in eager PyTorch. bf16 without copies of the whole cache: {:.2f}x the pure "
        "read, against {:.1f}x",
        both(read("tiled", "MHA bf16"), read("preallocated", "MHA bf16")),
    ),
    (
        "solutions/README.md",
        "No gather: {:.2f}x bare, against {:.2f}x; int8 dequantized as read: "
        "{:.2f}x, against {:.2f}x",
        both(bare("fused-paged"), bare("paged"), bare("fused-paged-int8"), bare("paged-int8")),
    ),
    (
        "solutions/README.md",
        "No gather and no scratch: {:.2f}x bare in float32",
        bare("fused-paged"),
    ),
    (
        "solutions/README.md",
        "holds 66 MiB, but is no faster here: {:.2f}x bare",
        bare("fused-paged-int8"),
    ),
    (
        "solutions/README.md",
        "the read. The fused path reads bf16 in place: {:.2f}x the read",
        read("fused", "MHA bf16"),
    ),
    (
        "solutions/README.md",
        "(float32: {:.2f}x bare against eager's {:.2f}x; MHA {:.2f}x)",
        both(bare("fused", "GQA 32/8 fp32"), bare("preallocated", "GQA 32/8 fp32"), bare("fused")),
    ),
    ("README.md", "No gather: {:.2f}x bare, not {:.2f}x", both(bare("fused-paged"), bare("paged"))),
    (
        "README.md",
        "int8 without a float32 copy of the cache: {:.2f}x bare, not {:.2f}x",
        both(bare("tiled-paged-int8"), bare("paged-int8")),
    ),
    (
        "solutions/README.md",
        "int8 upcast a tile at a time: {:.2f}x bare, against {:.2f}x",
        both(bare("tiled-paged-int8"), bare("paged-int8")),
    ),
    (
        "solutions/README.md",
        "{:.2f}x bare in int8 (78 MiB held), against paged's {:.2f}x, and "
        "{:.2f}x against {:.2f}x in float32",
        both(bare("tiled-paged-int8"), bare("paged-int8"), bare("tiled-paged"), bare("paged")),
    ),
]


@pytest.mark.parametrize("path, phrase, figure", QUOTED, ids=[f"{p}: {q}" for p, q, _ in QUOTED])
def test_a_quoted_bench_figure_is_the_measured_one(path, phrase, figure):
    value = figure(bench_table())
    expected = phrase.format(*(value if isinstance(value, tuple) else (value,)))
    assert expected in flat((ROOT / path).read_text())


def test_no_solution_claims_the_style_of_gpt_fast():
    """gpt-fast's model.py has a fixed size, repeat_interleave for GQA and a mask over the whole
    capacity: the pattern kv_cache.py argues against, never its style."""
    for path in SOLUTIONS.glob("*.py"):
        assert "style of gpt-fast" not in path.read_text(), path.name


# --- the tree of diffs --------------------------------------------------------------------------


def changed_lines(old: str, new: str) -> int:
    return sum(
        1
        for line in difflib.unified_diff(old.splitlines(), new.splitlines(), n=0, lineterm="")
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )


def code(source: str) -> str:
    return "\n".join(line for line in strip_prose(source).splitlines() if line.strip())


def test_concat_to_preallocated_changes_only_the_storage_and_the_grouping():
    concat = (SOLUTIONS / "concat_kv_cache.py").read_text()
    preallocated = (SOLUTIONS / "kv_cache_l6.py").read_text()
    assert changed_lines(code(concat), code(preallocated)) <= 24  # measured 18
    assert changed_lines(concat, preallocated) <= 100  # measured 80, the docstrings included
    # The same names, in the same order, with the same docstrings; preallocated adds a helper.
    definitions = [
        {
            node.name: ast.get_docstring(node)
            for node in ast.parse(source).body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))
        }
        for source in (concat, preallocated)
    ]
    assert list(definitions[1]) == ["KVCache", "_next_power_of_two", *list(definitions[0])[1:]]
    assert all(definitions[1][name] == doc for name, doc in definitions[0].items())


SECTION_8 = [
    "attend_chunk",
    "_check_chunk_query",
    "truncate",
    "_append_to_ring",
    "_make_ring",
    "_outside_window",
    "_in_time_order",
]


def test_the_speculative_step_adds_section_8_and_keeps_the_l6_code():
    """kv_cache.py is kv_cache_l6.py (the preallocated step as it stood at L6) with contract
    section 8 added: the same definitions in the same order with its functions after fork (and
    the ring's attend after attend), and of the L6 code only the lines section 8 has to widen
    change (the constructor's window, fork's copy of it, decode_step's absolute position)."""
    preallocated = (SOLUTIONS / "kv_cache_l6.py").read_text()
    speculative = (SOLUTIONS / "kv_cache.py").read_text()
    removed = [
        line
        for line in difflib.unified_diff(
            code(preallocated).splitlines(), code(speculative).splitlines(), n=0, lineterm=""
        )
        if line.startswith("-") and not line.startswith("---")
    ]
    assert len(removed) <= 3, removed  # measured 2: __init__'s signature, fork's KVCache(...)
    names = [
        [n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
        for source in (preallocated, speculative)
    ]
    assert [n for n in names[1] if n not in SECTION_8 + ["_attend_ring"]] == names[0]
    assert set(names[1]) - set(names[0]) == set(SECTION_8) | {"_attend_ring"}
    result = runner.invoke(cli.app, ["solution", "--diff", "preallocated", "speculative"])
    assert result.exit_code == 0
    assert result.stdout.startswith(
        "--- preallocated (kv_cache_l6.py)\n+++ speculative (kv_cache.py)\n"
    )
    assert "+def truncate(cache: KVCache, lengths: Tensor) -> None:" in result.stdout


def test_diff_prints_the_plain_unified_diff_to_a_pipe():
    result = runner.invoke(cli.app, ["solution", "--diff", "concat", "preallocated"])
    assert result.exit_code == 0, result.output
    expected = "".join(
        difflib.unified_diff(
            (SOLUTIONS / "concat_kv_cache.py").read_text().splitlines(keepends=True),
            (SOLUTIONS / "kv_cache_l6.py").read_text().splitlines(keepends=True),
            fromfile="concat (concat_kv_cache.py)",
            tofile="preallocated (kv_cache_l6.py)",
        )
    )
    assert result.stdout == expected
    assert "-        capacity = needed\n" in expected and "\x1b[" not in result.stdout


def test_diff_is_coloured_in_a_terminal(monkeypatch):
    class Terminal:
        stdout = type("Stdout", (), {"isatty": staticmethod(lambda: True)})()

    shown = io.StringIO()
    monkeypatch.setattr(solutions, "sys", Terminal)
    monkeypatch.setattr(
        cli,
        "_console",
        lambda stderr=False: Console(
            file=shown, force_terminal=True, color_system="truecolor", width=120
        ),
    )
    cli.solution(name=None, diff=("concat", "preallocated"))
    assert "\x1b[" in shown.getvalue()
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown.getvalue())
    assert "capacity = _next_power_of_two(needed)" in plain


@pytest.mark.parametrize(
    "args, says",
    [
        (["--diff", "concat", "nope"], "no solution 'nope'"),
        (["paged", "--diff", "concat", "paged"], "not both"),
    ],
    ids=["unknown-step", "name-and-diff"],
)
def test_diff_usage_errors(args, says):
    result = runner.invoke(cli.app, ["solution", *args])
    assert result.exit_code == 2 and says in result.output


def test_readme_prints_the_solutions_story_as_it_is_to_a_pipe():
    result = runner.invoke(cli.app, ["solution", "--readme"])
    assert result.exit_code == 0, result.output
    assert result.stdout == README.read_text()


def test_readme_is_rendered_in_a_terminal(monkeypatch):
    class Terminal:
        stdout = type("Stdout", (), {"isatty": staticmethod(lambda: True)})()

    shown = io.StringIO()
    monkeypatch.setattr(solutions, "sys", Terminal)
    monkeypatch.setattr(cli, "_console", lambda stderr=False: Console(file=shown, width=120))
    cli.solution(name=None, diff=None, readme=True)
    title = README.read_text().splitlines()[0]
    assert title.startswith("# ") and title[2:] in shown.getvalue()
    assert title not in shown.getvalue(), "Markdown shown as its source"


@pytest.mark.parametrize(
    "args",
    [["concat", "--readme"], ["--readme", "--diff", "concat", "paged"]],
    ids=["name", "diff"],
)
def test_readme_with_a_step_is_a_usage_error(args):
    result = runner.invoke(cli.app, ["solution", *args])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "kata: error: --readme prints the steps' story alone: no NAME, no --diff"
    )


def test_a_step_against_itself_is_no_diff():
    result = runner.invoke(cli.app, ["solution", "--diff", "paged", "paged"])
    assert result.exit_code == 0 and result.stdout == ""


DENSE_ATTENTION_STEPS = ["tiled", "fused"]


@pytest.mark.parametrize("step", DENSE_ATTENTION_STEPS)
def test_an_attention_step_is_the_preallocated_file_with_attends_math_swapped(step):
    label, source = solutions.step_source(step)
    preallocated = (SOLUTIONS / "kv_cache_l6.py").read_text()
    function = f"{step}_attention"
    assert f"{function}.py" in label
    tree = ast.parse(source)
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert names.index(function) == names.index("attend") + 1
    attend = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "attend")
    assert (
        ast.unparse(attend.body[-1])
        == f"return {function}(query, cache.keys, cache.values, cache.lengths)"
    )
    # Outside attend and the new function, not a line changes.
    removed = [
        line
        for line in difflib.ndiff(preallocated.splitlines(), source.splitlines())
        if line.startswith("- ")
    ]
    old_attend = attention_steps.top_level_function(preallocated, "attend")
    math_lines = preallocated.splitlines()[old_attend.body[0].lineno - 1 : old_attend.end_lineno]
    assert all(line[2:] in math_lines for line in removed)


PAGED_ATTENTION_STEPS = {"tiled-paged": True, "fused-paged": False}  # step: keeps the scratch


@pytest.mark.parametrize(
    "step, keeps_scratch", PAGED_ATTENTION_STEPS.items(), ids=PAGED_ATTENTION_STEPS
)
def test_a_paged_attention_step_is_the_paged_file_with_attends_math_and_its_gather_swapped(
    step, keeps_scratch
):
    label, source = solutions.step_source(step)
    paged = (SOLUTIONS / "paged_kv_cache.py").read_text()
    function = step.replace("-", "_") + "_attention"
    assert f"{function}.py" in label
    tree = ast.parse(source)
    assert [n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))][-2:] == [
        "PagedKVCache",
        function,
    ]
    cache = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "PagedKVCache")
    methods = {n.name: n for n in cache.body if isinstance(n, ast.FunctionDef)}
    assert "_gather" not in methods, "the gather goes"
    assert ("_scratch" in methods) == keeps_scratch, "its scratch goes unless the step takes it"
    passed = ", self._scratch" if keeps_scratch else ""
    assert ast.unparse(methods["attend"].body[-1]) == (
        f"return {function}(query, "
        f"self.k_pool, self.v_pool, self.k_scale, self.v_scale, index, lengths{passed})"
    )
    # Outside attend's math, the gather and its scratch, not a line changes.
    old_cache = next(
        n for n in ast.parse(paged).body if isinstance(n, ast.ClassDef) and n.name == "PagedKVCache"
    )
    old = {n.name: n for n in old_cache.body if isinstance(n, ast.FunctionDef)}
    lines = paged.splitlines()
    math_lines = lines[old["attend"].body[0].lineno - 1 : old["_scratch"].end_lineno]
    buffers = [line for line in lines if "self._buffers" in line]
    removed = [
        line[2:] for line in difflib.ndiff(lines, source.splitlines()) if line.startswith("- ")
    ]
    assert all(line in math_lines or line in buffers for line in removed)
    assert "_gather" not in source
    assert ("self._buffers" in source) == keeps_scratch
    if keeps_scratch:
        assert ast.unparse(methods["_scratch"]) == ast.unparse(old["_scratch"])


ATTENTION_STEPS = [
    ("tiled", "dense"),
    ("fused", "dense"),
    ("tiled-paged", "serving"),
    ("fused-paged", "serving"),
]


@pytest.mark.slow
@pytest.mark.parametrize("step, track", ATTENTION_STEPS, ids=[s for s, _ in ATTENTION_STEPS])
def test_an_attention_step_grades(step, track, tmp_path):
    """The printed step is a whole implementation: it passes every item of its track, public and
    hidden."""
    from tests.grading import grade
    from graders.shared.tracks import TRACKS

    path = tmp_path / TRACKS[track].implementation
    path.write_text(solutions.step_source(step)[1])
    tests = SOLUTIONS / "test_kv_cache.py" if track == "dense" else None
    result = grade(path, tests, track=track, hidden=True)
    assert not result.grader_broke
    assert result.passed and result.score == result.max_score, [
        f"{i.id}: {i.message}" for i in result.items if i.status != "pass"
    ]
    assert track != "dense" or result.level == "L6"
