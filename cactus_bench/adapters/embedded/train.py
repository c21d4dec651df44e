"""Training a small Qwen3-architecture LM on CPU: answer-only next-token loss, AdamW, warm-up + cosine."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel, Qwen3Config

from cactus_bench.adapters.embedded.random_models import qwen3_shape, random_lm

IGNORE = -100


def model_config(
    vocab_size: int,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    eos_token_id: int,
    pad_token_id: int,
    max_positions: int = 512,
) -> Qwen3Config:
    return Qwen3Config(
        **qwen3_shape(
            vocab_size,
            hidden,
            layers,
            heads,
            kv_heads,
            intermediate_size=intermediate,
            max_positions=max_positions,
            tie_word_embeddings=True,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
        )
    )


def encode_examples(tokenizer, prompts: list[str], completions: list[str]) -> list[tuple[list[int], int]]:
    """(ids, prompt_length) per example; loss is taken on the completion tokens only."""
    p_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]  # batched: the Rust tokenizer's fast path
    c_ids = tokenizer(completions, add_special_tokens=False)["input_ids"]
    return [(p + c, len(p)) for p, c in zip(p_ids, c_ids)]


class LazyExamples(Sequence):
    """`encode_examples`, one example at a time as training draws it: a few steps of a recipe encode the
    examples they use, not all 30,000 of them."""

    def __init__(self, tokenizer, prompts: list[str], completions: list[str]):
        self.tokenizer, self.prompts, self.completions = tokenizer, prompts, completions
        self.done: dict[int, tuple[list[int], int]] = {}

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, i):
        if i not in self.done:
            self.done[i] = encode_examples(self.tokenizer, [self.prompts[i]], [self.completions[i]])[0]
        return self.done[i]


def collate(batch: list[tuple[list[int], int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (ids, n_prompt) in enumerate(batch):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, n_prompt : len(ids)] = torch.tensor(ids[n_prompt:])
        mask[i, : len(ids)] = 1
    return input_ids, labels, mask


def train(
    config: Qwen3Config,
    examples: list[tuple[list[int], int]],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    log: Callable[[str], None] = print,
    on_step: Callable[[], None] | None = None,
    fingerprint_at: int | None = None,
    stop_after: int | None = None,
) -> PreTrainedModel:
    """Train from a seeded init; deterministic for a given seed (single process, CPU). `fingerprint_at`:
    after that many steps, the weights' `state_hash` is kept as `model.fingerprint` (a check of the build's
    first steps costs those steps alone); `stop_after`: stop there, the schedule still that of `steps`."""
    model = random_lm(config, seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(steps // 20, 1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s / steps, 1.0)))
    )
    g = torch.Generator().manual_seed(seed)
    pad = config.pad_token_id
    if pad is None:
        raise ValueError("the model config names no pad token (training pads batches with it)")
    start = time.perf_counter()
    fingerprint = None
    for step in range(steps if stop_after is None else min(steps, stop_after)):
        idx = torch.randint(0, len(examples), (batch_size,), generator=g).tolist()
        input_ids, labels, mask = collate([examples[i] for i in idx], pad)
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if on_step is not None:
            on_step()
        if step + 1 == fingerprint_at:
            fingerprint = state_hash(model)
        if step % max(steps // 4, 1) == 0 or step == steps - 1:
            log(f"  step {step + 1}/{steps}  loss {loss.item():.3f}  ({time.perf_counter() - start:.0f}s)")
    model.fingerprint = fingerprint
    return model.eval()


def state_hash(model: torch.nn.Module) -> str:
    """sha256 of the weights' bytes, tensor by tensor in name order."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()
