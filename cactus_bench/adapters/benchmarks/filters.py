"""The authors' scoring filters (their `spec.py`), registered with lm-eval so task YAMLs can name them.

`remove_thinking_token` runs first in every filter chain of every task: a reply is stored raw (thinking
included) and the filter decides what is scored, so re-scoring stored replies gives the live numbers.
`take_last` makes the authors' extra `flexible-extract-last` chain.
"""

from __future__ import annotations

import builtins
import re
import sys
import unicodedata
from functools import cache

from lm_eval.api.filter import Filter
from lm_eval.api.registry import filter_registry, register_filter
from lm_eval.filters import extraction

_THINK_BLOCK = re.compile(r"<think>.*?</think>", flags=re.DOTALL)


def remove_thinking(text: str) -> str:
    """Delete each complete `<think>…</think>` block, then everything up to a stray `</think>`, then any
    remaining `<think>` tag, then leading newlines. A reply cut off while thinking keeps its reasoning text
    (it can still contain an answer)."""
    text = _THINK_BLOCK.sub("", text)
    # everything up to the last stray </think> (the authors' `.*?</think>` substitution, without its
    # quadratic scan of a long reply that has none)
    text = text.rpartition("</think>")[2]
    text = text.replace("<think>", "")
    return text.lstrip("\n")


class RemoveThinkingToken(Filter):
    def apply(self, resps, docs):
        return [[remove_thinking(r) for r in inst] for inst in resps]


class TakeLast(Filter):
    def apply(self, resps, docs):
        return (inst[-1] for inst in resps)


for _name, _cls in (("remove_thinking_token", RemoveThinkingToken), ("take_last", TakeLast)):
    if _name not in filter_registry:  # importing twice (tests, lm-eval's own copy) must not fail
        register_filter(_name)(_cls)


@cache
def _punctuation() -> tuple[int, ...]:
    return tuple(i for i in builtins.range(sys.maxunicode) if unicodedata.category(chr(i)).startswith("P"))


def _range(*args):
    """lm-eval 0.4.13's multi-choice filter (GPQA's extraction) rebuilds its punctuation table on every call
    by testing all 1.1 million code points (~0.45 s a call, two calls a reply). Its generator keeps the code
    points of `range(sys.maxunicode)` whose category starts with P; given just those (found once), it builds
    the same table. Every other `range` in that module is the builtin."""
    return _punctuation() if args == (sys.maxunicode,) else builtins.range(*args)


extraction.range = _range
