"""transformers' own decoding (`generate`, and assisted generation for SpS) set up to run the same law as our
loops, for the benchmarks that compare against it.

Passing temperature, top-k and top-p in the generation config is not enough for assisted generation: the
assistant's candidate generator hands the assistant both the caller's logits processors and a copy of the
generation config, from which the assistant builds the same warpers again (transformers 5.17 to 5.24), so
the drafter samples from temperature^2, top-k twice and top-p twice: a sharper p than the verifier's law
assumes, fewer accepted drafts, and a slower reference that flatters whoever is compared with it. Earlier
releases did the opposite (the drafter at temperature 1; huggingface/transformers#40976). Here the warpers are
passed once, as processors, with a config that builds none, so each model warps its logits exactly once.

`generate` also fills every field the passed config leaves unset from the model's own generation_config.json
(transformers 5): a checkpoint's repetition penalty or min-p would reach the reference. `model_defaults_off`
hides a model's sampling defaults while inside; only its token ids stay.

The draft schedule is read from the drafter's own generation config (never from the config passed to
`generate`): without `assistant_setup` a drafter drafts up to 20 tokens and stops early below confidence
0.4, transformers' defaults, not m.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from transformers import (
    GenerationConfig,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

# how transformers' assisted generation is set up: the same law as ours (default), or as it ships
ASSISTANT_WARPS = ("same_law", "as_shipped")


def sampling(
    temperature: float, top_k: int, top_p: float, new_tokens: int, *, assistant_warps: str = "same_law"
) -> dict:
    """`generate`'s keyword arguments for exactly `new_tokens` tokens (no EOS stop) from the paper's warping
    (temperature, then top-k, then top-p; temperature 0: greedy). With `assistant_warps="same_law"` an
    assistant warps its logits once, as the verifier does; "as_shipped" passes the warping in the config
    only, as a user would, and transformers applies it to the assistant twice."""
    if assistant_warps not in ASSISTANT_WARPS:
        raise ValueError(f"assistant_warps must be one of {ASSISTANT_WARPS}; got {assistant_warps!r}")
    fixed_length = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, eos_token_id=None, pad_token_id=0)
    if temperature == 0:
        return {"generation_config": GenerationConfig(do_sample=False, **fixed_length)}
    if assistant_warps == "as_shipped":
        config = GenerationConfig(
            do_sample=True, temperature=temperature, top_k=top_k or None, top_p=top_p, **fixed_length
        )
        return {"generation_config": config}
    warpers = [TemperatureLogitsWarper(temperature)]
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1:
        warpers.append(TopPLogitsWarper(top_p))
    # top_k=0, not None: None falls back to transformers' default of 50 and builds a second top-k
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, **fixed_length)
    return {"generation_config": config, "logits_processor": LogitsProcessorList(warpers)}


TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


@contextmanager
def model_defaults_off(*models) -> Iterator[None]:
    """Each model's generation config holds only its token ids while inside (no sampling defaults for
    `generate` to fill in); its own config is restored after."""
    before = [model.generation_config for model in models]
    for model, config in zip(models, before):
        model.generation_config = GenerationConfig(**{k: getattr(config, k, None) for k in TOKEN_IDS})
    try:
        yield
    finally:
        for model, config in zip(models, before):
            model.generation_config = config


@contextmanager
def assistant_setup(drafter, m: int) -> Iterator[None]:
    """The drafter drafts exactly m tokens every round (constant schedule, no confidence stop) while inside;
    its generation config is restored after."""
    config = drafter.generation_config
    keys = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
    before = {k: getattr(config, k, None) for k in keys}
    config.num_assistant_tokens = m
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0
    try:
        yield
    finally:
        for k, v in before.items():
            setattr(config, k, v)
