"""Spec-Bench's own arithmetic, written from its documentation, to hold this harness's columns against."""


def speed_py(method: list[dict], baseline: list[dict], task: str, tokens_of) -> float:
    """Spec-Bench's evaluation/speed.py as its documentation and output describe it, written here from
    that description: for a task (a category, `mt_bench` for MT-Bench's eight, or `overall`), every answer
    of that task in each file; the method's speed is each answer's Σ new_tokens / Σ wall_time, averaged; the
    baseline's is each answer's turns re-tokenised, one token less per turn, over its Σ wall_time, averaged;
    the speedup is the ratio of the two means."""
    mt_bench = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}

    def of_task(answers):
        if task == "overall":
            return answers
        return [a for a in answers if (a["category"] in mt_bench if task == "mt_bench" else a["category"] == task)]

    mine = [sum(a["choices"][0]["new_tokens"]) / sum(a["choices"][0]["wall_time"]) for a in of_task(method)]
    base = [
        sum(len(tokens_of(t)) - 1 for t in a["choices"][0]["turns"]) / sum(a["choices"][0]["wall_time"])
        for a in of_task(baseline)
    ]
    return (sum(mine) / len(mine)) / (sum(base) / len(base))
