"""The authors' scoring filters (their `spec.py`), registered with lm-eval so task YAMLs can name them.

`remove_thinking_token` runs first in every filter chain of every task: a reply is stored raw (thinking
included) and the filter decides what is scored, so re-scoring stored replies gives the live numbers.
`take_last` makes the authors' extra `flexible-extract-last` chain.
"""

from __future__ import annotations

import re

from lm_eval.api.filter import Filter
from lm_eval.api.registry import filter_registry, register_filter

_THINK_BLOCK = re.compile(r"<think>.*?</think>", flags=re.DOTALL)
_UP_TO_STRAY_END = re.compile(r".*?</think>", flags=re.DOTALL)


def remove_thinking(text: str) -> str:
    """Delete each complete `<think>…</think>` block, then everything up to a stray `</think>`, then any
    remaining `<think>` tag, then leading newlines. A reply cut off while thinking keeps its reasoning text
    (it can still contain an answer)."""
    text = _THINK_BLOCK.sub("", text)
    text = _UP_TO_STRAY_END.sub("", text)
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
