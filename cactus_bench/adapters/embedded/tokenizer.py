"""A small BPE tokenizer trained locally with the `tokenizers` library, with a Qwen-style chat template
so the offline pair goes through exactly the code paths a Qwen3 pair does (chat template, <|im_end|> EOS)."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chat_text(question: str, answer: str | None = None) -> str:
    """The chat-formatted text the template produces (training sequences use it verbatim)."""
    text = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    return text if answer is None else text + answer + "<|im_end|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int = 384) -> PreTrainedTokenizerFast:
    """Byte-level BPE with digits split one per token (arithmetic needs digit-level ids); a space before a
    digit stays with it (" 63" is "Ġ6", "3"), which keeps replies short."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r" ?\d"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )
