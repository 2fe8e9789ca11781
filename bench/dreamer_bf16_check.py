"""Does bfloat16 training keep the losses right? Same model, data and noise, float32 against bfloat16.

    .venv/bin/python bench/dreamer_bf16_check.py bench/results/dreamer_bf16_check.json

XS MUSE-WM (the ``cpu`` profile's model and learning rates), batch 8 x 32, 128 imagination starts,
80 updates on synthetic sequences with something to learn (observations: a random walk driven by
the actions, reward tanh(obs[0]), labels obs[:5] > 0), the same batches and torch seeds for both.
Writes every update's metrics for both precisions and the mean of the first / last 10 updates.
Not a timing (run it anywhere).
"""
from __future__ import annotations

import json
import sys

import torch

from metacog_fast.metaworld.models.dreamer import Dreamer, DreamerConfig
from metacog_fast._atomic import atomic_write_bytes

B, T, O, A, UPDATES = 8, 32, 59, 4, 80
KEYS = ("loss_wm", "loss_dec", "loss_rew", "loss_cont", "kl_dyn", "loss_sa", "loss_actor", "loss_critic", "return_mean")


def batch(i: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(i)
    a = torch.rand(B, T, A, generator=g) * 2 - 1
    W = torch.randn(A, O, generator=torch.Generator().manual_seed(123)) * 0.3
    obs = torch.cumsum(a @ W, 1) + 0.05 * torch.randn(B, T, O, generator=g)
    return {"obs": obs, "prev_action": torch.cat([torch.zeros(B, 1, A), a[:, :-1]], 1), "reward": torch.tanh(obs[..., 0]),
            "cont": torch.ones(B, T), "labels": (obs[..., :5] > 0).float()}


def main(out_path: str) -> None:
    torch.set_num_threads(1)
    runs: dict[str, list[dict[str, float]]] = {}
    for prec in ("float32", "bfloat16"):
        m = Dreamer(DreamerConfig(preset="XS", precision=prec, wm_lr=3e-4, ac_lr=1e-4))
        runs[prec] = []
        for i in range(UPDATES):
            torch.manual_seed(i)
            runs[prec].append(m.train_step(batch(i), ac_starts=128))
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    summary = {k: {p: {"first10": mean([r[k] for r in runs[p][:10]]), "last10": mean([r[k] for r in runs[p][-10:]])}
                   for p in runs} for k in KEYS}
    for k, v in summary.items():
        print(f"{k:12s} first10 fp32 {v['float32']['first10']:9.4f} bf16 {v['bfloat16']['first10']:9.4f} | "
              f"last10 fp32 {v['float32']['last10']:9.4f} bf16 {v['bfloat16']['last10']:9.4f}")
    doc = {"config": {"preset": "XS", "batch": B, "rows": T, "ac_starts": 128, "updates": UPDATES},
           "summary": summary, "runs": runs}
    atomic_write_bytes(out_path, json.dumps(doc, indent=1).encode())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results/dreamer_bf16_check.json")
