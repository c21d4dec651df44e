"""The transformers backend of `Decoder`: our decode loops over Hugging Face causal LMs.

Engines: `eager` (dynamic KV caches), `static` (preallocated caches, rollback by position) and `fast`
(static caches and compiled decode forwards).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch

from ..api import DECODERS, DecoderSettings, Generation, Request, stable_seed

if TYPE_CHECKING:
    from ...methods import Method
    from ...models import Pair

ENGINES = {  # engine -> the loops' cache and compile options
    "eager": {"static_cache": False, "compile": False},
    "static": {"static_cache": True, "compile": False},
    "fast": {"static_cache": True, "compile": True},
}


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """lm-eval's convention: the text before the first stop string."""
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return text[:cut] if cut >= 0 else text


class HFDecoder:
    """Decodes requests one at a time with the method's loop (batch size 1, as the paper times)."""

    def __init__(self, pair: Pair, method: Method, settings: DecoderSettings):
        if settings.engine not in ENGINES:
            raise ValueError(f"unknown engine {settings.engine!r}; choose one of {', '.join(ENGINES)}")
        self.pair, self.method, self.settings = pair, method, settings
        self.device = pair.verifier.get_input_embeddings().weight.device

    def generate(self, requests: Sequence[Request]) -> Iterator[Generation]:
        for req in requests:
            yield self._generate(req)

    def _generate(self, req: Request) -> Generation:
        s, tok = self.settings, self.pair.tokenizer
        ids = req.prompt
        if isinstance(ids, str):
            ids = tok(ids, add_special_tokens=s.add_bos_token)["input_ids"]
        stops = [x for x in req.stop if x]
        window = max((len(x) for x in stops), default=0) + 16

        def stop(tokens: list[int]) -> bool:  # only the tail can newly contain a stop string
            return any(x in tok.decode(tokens[-window:]) for x in stops)

        out = self.method.generate(
            self.pair.drafter,
            self.pair.verifier,
            ids,
            max_new_tokens=req.max_new_tokens or s.max_new_tokens,
            generator=torch.Generator(device=self.device).manual_seed(stable_seed(s.seed, req.key)),
            eos_token_id=self.pair.eos_token_id,
            stop=stop if stops else None,
            **s.sampling,
            **ENGINES[s.engine],
            **s.options,
        )
        raw = tok.decode(out.tokens, skip_special_tokens=True) if tok is not None else ""
        return Generation(req, out, cut_at_stop(raw, stops), raw)


@DECODERS.register("hf")
def _hf(pair: Pair, method: Method, settings: DecoderSettings) -> HFDecoder:
    return HFDecoder(pair, method, settings)
