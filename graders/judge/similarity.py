"""How much of a candidate's file matches each bundled solution of its track (contract section 3,
v1.1 `similarity`): information for the interviewer, never a status, score or level.

Winnowed fingerprints, as MOSS computes them (Schleimer, Wilkerson, Aiken, "Winnowing: local
algorithms for document fingerprinting", SIGMOD 2003), over Python tokens normalised so that
renaming and reformatting change nothing:

- the `tokenize` module reads the source (the candidate's file is text here: it is never
  imported or run); comments, string statements (docstrings) and the layout tokens NEWLINE, NL,
  INDENT and DEDENT are dropped, and so are what formatters add and remove: a comma just before
  a closing bracket, and parentheses that group (any "(" that does not follow a name or a
  closing bracket, as a call's and a definition's do, with its ")");
- every name that is not a keyword becomes one placeholder: local names, arguments, classes,
  attributes and builtins alike (a renamed private attribute costs a copier as little as a
  renamed local); every string literal (adjacent ones are one) becomes another; numbers and
  operators stay.

A fingerprint is a hash of K consecutive normalised tokens; winnowing keeps the smallest of every
W consecutive hashes (the rightmost on ties), so any stretch of K + W - 1 tokens that two files
share gives them a fingerprint in common. K = 25 tokens is two to three lines of code: with every
name one placeholder, shorter runs recur by chance between independent designs. W = 10
guarantees that a shared stretch of 34 tokens (three or four lines) shows, and still keeps about
320 fingerprints of the reference solution, enough for a steady fraction. benchmarks/README.md
gives the measurements behind both.

The starter's given code (its imports, `apply_rope`, the signatures) is in every candidate's
file, borrowed or not: a fingerprint of the candidate's whose K tokens also occur in the track's
starter is left out, as MOSS leaves out a base file. An untouched starter reads 0.
"""

from __future__ import annotations

import hashlib
import io
import keyword
import tokenize
from functools import lru_cache
from pathlib import Path

from graders.shared import bundled
from graders.shared.tracks import BATCHING, DENSE, SERVING, Track

K = 25  # tokens a fingerprint hashes
W = 10  # consecutive hashes winnowing keeps one of
MAX_BYTES = 1 << 18  # a candidate's file is tens of KB: a larger one is compared on its start
_BASE, _MASK = 1_000_003, 2**64 - 1  # the rolling hash's base (odd) and modulus

SOLUTIONS = {
    DENSE: ("kv_cache.py", "concat_kv_cache.py"),
    SERVING: ("paged_kv_cache.py",),
    BATCHING: ("scheduler.py",),
}

_NAME, _STRING = "N", "S"
_LAYOUT = {tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
_OPENING, _CLOSING = {"(", "[", "{"}, {")", "]", "}"}
_CALLED = ([(False, _NAME)], [(False, ")")], [(False, "]")])  # what a call's "(" follows
# Python 3.12 splits an f-string into tokens of its own; before, it is one STRING.
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


def similarity(candidate_path: Path, track: Track) -> list[dict]:
    """One entry a bundled solution of `track`: {"solution": "solutions/<name>", "fraction": the
    `fraction` of the candidate's file (read as text, never run, its first MAX_BYTES only) found
    in it, to 2 decimals}."""
    with open(candidate_path, "rb") as file:
        candidate = file.read(MAX_BYTES).decode("utf-8", errors="replace")
    own = _own(candidate, (bundled.STARTER / track.implementation).read_text())
    return [
        {
            "solution": f"solutions/{name}",
            "fraction": round(_share(own, (bundled.SOLUTIONS / name).read_text()), 2),
        }
        for name in SOLUTIONS[track]
    ]


def fraction(candidate_source: str, solution_source: str, starter_source: str) -> float:
    """The share, 0..1, of the candidate's fingerprints (those not from the starter) that are
    fingerprints of the solution too. 0.0 when the candidate does not tokenize (an unterminated
    string, an unmatched bracket or dedent) or has no fingerprint of its own."""
    return _share(_own(candidate_source, starter_source), solution_source)


def _own(candidate_source: str, starter_source: str) -> set[int]:
    """The candidate's fingerprints whose K tokens are not the starter's too; none when the
    candidate does not tokenize."""
    tokens = _tokens(candidate_source)
    if tokens is None:
        return set()
    return _winnow(_hashes(tokens)) - _every_hash(starter_source)


def _share(own: set[int], solution_source: str) -> float:
    return len(own & _fingerprints(solution_source)) / len(own) if own else 0.0


@lru_cache(maxsize=8)  # the starters' and the solutions': the same sources every grade
def _every_hash(source: str) -> frozenset[int]:
    return frozenset(_hashes(_tokens(source)))


@lru_cache(maxsize=8)
def _fingerprints(source: str) -> frozenset[int]:
    return frozenset(_winnow(_hashes(_tokens(source))))


def _tokens(source: str) -> list[str] | None:
    """`source` as normalised tokens (module docstring); None when it does not tokenize."""
    tokens, line = [], []  # line: (is a string, normalised text) of the logical line so far
    grouping = []  # for each bracket open: whether it is a grouping parenthesis (dropped)
    fstrings = 0  # f-strings open (Python 3.12+): their parts are inside one string literal
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if fstrings:
                fstrings += (token.type == _FSTRING_START) - (token.type == _FSTRING_END)
            elif token.type == tokenize.NEWLINE:
                if not all(is_string for is_string, _ in line):  # not a string statement
                    tokens += [text for _, text in line]
                line = []
            elif token.type in (tokenize.STRING, _FSTRING_START):
                fstrings = 1 if token.type == _FSTRING_START else 0
                if line[-1:] != [(True, _STRING)]:  # adjacent literals are one string
                    line.append((True, _STRING))
            elif token.type == tokenize.NAME and not keyword.iskeyword(token.string):
                line.append((False, _NAME))
            elif token.string in _OPENING:
                grouping.append(token.string == "(" and line[-1:] not in _CALLED)
                if not grouping[-1]:
                    line.append((False, token.string))
            elif token.string in _CLOSING:
                if line[-1:] == [(False, ",")]:
                    line.pop()
                if not (grouping and grouping.pop()):
                    line.append((False, token.string))
            elif token.type not in _LAYOUT:
                line.append((False, token.string))
    except (tokenize.TokenError, SyntaxError):  # IndentationError and TabError are SyntaxErrors
        return None
    return tokens  # the last logical line too: tokenize ends every source with a NEWLINE


def _hashes(tokens: list[str]) -> list[int]:
    """The hash of every K consecutive tokens, in order: a Karp-Rabin rolling hash modulo 2**64
    (as the paper's) over a blake2b code of each token, the same in every process (Python's own
    str hash is salted a process)."""
    codes = {
        token: int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "big")
        for token in set(tokens)
    }
    hashes, rolling, leading = [], 0, pow(_BASE, K - 1, 2**64)
    for i, token in enumerate(tokens):
        if i >= K:
            rolling -= codes[tokens[i - K]] * leading
        rolling = (rolling * _BASE + codes[token]) & _MASK
        if i >= K - 1:
            hashes.append(rolling)
    return hashes


def _winnow(hashes: list[int]) -> set[int]:
    """Robust winnowing: the smallest hash of every window of W, the rightmost on ties, each
    selected position once; a text shorter than one window keeps its smallest hash."""
    if len(hashes) < W:
        return {min(hashes)} if hashes else set()
    selected, chosen = set(), -1
    for start in range(len(hashes) - W + 1):
        window = hashes[start : start + W]
        smallest = min(window)
        position = start + W - 1 - window[::-1].index(smallest)
        if position != chosen:
            selected.add(smallest)
            chosen = position
    return selected
