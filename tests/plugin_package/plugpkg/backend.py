"""A backend that loads no model: it answers each question with a canned reply (a number from the prompt's
hash) and made-up rounds, so a test can drive the whole app through a backend the package did not write."""

import hashlib

from cactus_bench.core.decode.api import BACKENDS, Backend, Generation
from cactus_bench.core.decode.stats import GenerationOutput, Rounds


class CannedDecoder:
    device = "cpu"
    tokenizer_name = "canned"

    def __init__(self, models, spec):
        self.spec = spec

    def apply_chat_template(self, chat_history, add_generation_prompt=True):
        return "\n".join(turn["content"] for turn in chat_history)

    def generate(self, requests):
        method = self.spec.method
        m = method.m if method.uses_drafter else 0
        for req in requests:
            digest = hashlib.sha256(f"{req.prompt}{method.name}".encode()).digest()
            text = f"So the answer is\n#### {digest[0] % 7}"
            rounds = Rounds()
            tokens = []
            while len(tokens) < min(len(text), self.spec.max_new_tokens):
                accepted = digest[len(tokens) % 32] % (m + 1) if m else 0
                emitted = min(accepted + 1, self.spec.max_new_tokens - len(tokens))
                tokens += [1] * emitted
                rounds.add(
                    drafted=m,
                    accepted=accepted,
                    accepted_any=accepted,
                    emitted=emitted,
                    t_draft=0.001 * m,
                    t_verify=0.01,
                    t_rule=0.0,
                    t_other=0.0,
                    kl_sum=0.0,
                    kl_count=0,
                    out_kl_sum=0.0,
                    out_kl_count=0,
                    out_kl_skipped=0,
                )
            wall = sum(rounds.t_draft) + sum(rounds.t_verify)
            out = GenerationOutput(tokens, rounds, 0.0, wall, "length")
            yield Generation(req, out, text, text)


BACKENDS.add(
    "canned",
    Backend(
        load=CannedDecoder,
        engines=("canned",),
        devices=("cpu",),
    ),
)
