"""A G-test of observed counts against an exact law, shared by the rule and decode-loop tests."""

import torch

P_THRESHOLD = 1e-6  # strict: a correct kernel at a fixed seed passes; a broken one misses by far


def g_test_pvalue(samples: torch.Tensor, law: torch.Tensor, min_expected: float = 5.0) -> float:
    """p-value of a G-test that integer `samples` in [0, len(law)) are i.i.d. draws from `law`.

    Cells with expected count < min_expected are pooled; a sample in a zero-probability cell gives 0.
    """
    law = law.double()
    counts = torch.bincount(samples.flatten(), minlength=law.numel()).double()
    n = counts.sum()
    if bool(((law == 0) & (counts > 0)).any()):
        return 0.0
    exp = n * law
    big = exp >= min_expected
    obs_cells = torch.cat([counts[big], counts[~big].sum().reshape(1)])
    exp_cells = torch.cat([exp[big], exp[~big].sum().reshape(1)])
    keep = exp_cells > 0
    obs_cells, exp_cells = obs_cells[keep], exp_cells[keep]
    if obs_cells.numel() < 2:
        return 1.0
    nz = obs_cells > 0
    g = 2 * (obs_cells[nz] * torch.log(obs_cells[nz] / exp_cells[nz])).sum()
    df = obs_cells.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), g / 2))
