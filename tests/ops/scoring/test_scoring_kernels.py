"""score_trajectories and mean_pool_l2norm: every backend against the torch reference
(fp32, atol 1e-5 on probabilities/embeddings, gradients included), and bad input."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from metacog_fast import BackendUnavailable, backends
from metacog_fast.kernels import init_scoring_head, mean_pool_l2norm, score_trajectories
from metacog_fast.ops.scoring import naive as ref

ATOL = 1e-5
BATCHES = [1, 3, 63, 257]


def _available() -> list[str]:
    info = backends()
    out = []
    if info["cpu"] is not None:
        out.append("cpu")
    if info["triton"].get("usable"):
        out.append("triton")
    return out


BACKENDS = _available()


def _inputs(B: int, broadcast: bool, seed: int = 0, dtr: int = 384, dta: int = 384):
    g = torch.Generator().manual_seed(seed)
    traj = torch.nn.functional.normalize(torch.randn(B, dtr, generator=g), dim=-1)
    task = torch.nn.functional.normalize(torch.randn(1 if broadcast else B, dta, generator=g), dim=-1)
    return task, traj


def test_backends_present():
    assert "cpu" in BACKENDS, "compiled core not built: scripts/dev_build.sh or pip install -e ."


def test_init_head_names_and_shapes():
    h = init_scoring_head()
    assert {k: tuple(v.shape) for k, v in h.items()} == {
        "l0.w": (256, 768), "l0.b": (256,), "l1.w": (64, 256), "l1.b": (64,), "out.w": (1, 64), "out.b": (1,)}
    h2 = init_scoring_head(10, (5,), seed=3)
    assert list(h2) == ["l0.w", "l0.b", "out.w", "out.b"]
    torch.testing.assert_close(init_scoring_head(seed=1)["l0.w"], init_scoring_head(seed=1)["l0.w"])
    assert not torch.equal(init_scoring_head(seed=1)["l0.w"], init_scoring_head(seed=2)["l0.w"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("broadcast", [True, False])
@pytest.mark.parametrize("B", BATCHES)
def test_score_matches_reference(backend, broadcast, B):
    head = init_scoring_head(seed=B)
    task, traj = _inputs(B, broadcast, seed=B)
    want = ref.score_trajectories(task, traj, head)
    got = score_trajectories(task, traj, head, backend=backend)
    assert got.shape == (B,)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    # numpy in -> numpy out, same numbers
    got_np = score_trajectories(task.numpy(), traj.numpy(), {k: v.numpy() for k, v in head.items()}, backend=backend)
    assert isinstance(got_np, np.ndarray)
    np.testing.assert_allclose(got_np, want.numpy(), atol=ATOL, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("hidden", [(7,), (17, 5, 3)])
def test_score_other_head_shapes(backend, hidden):
    head = init_scoring_head(10 + 7, hidden, seed=5)
    for B, bc in ((1, True), (3, False), (63, True)):
        task, traj = _inputs(B, bc, dtr=10, dta=7)
        torch.testing.assert_close(score_trajectories(task, traj, head, backend=backend),
                                   ref.score_trajectories(task, traj, head), atol=ATOL, rtol=0)


def test_broadcast_equals_repeated_rows():
    head = init_scoring_head(seed=2)
    task, traj = _inputs(63, True)
    for be in BACKENDS:
        torch.testing.assert_close(score_trajectories(task, traj, head, backend=be),
                                   score_trajectories(task.expand(63, -1).contiguous(), traj, head, backend=be),
                                   atol=ATOL, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("B,broadcast", [(1, True), (3, False), (63, True), (257, False)])
def test_score_gradients(backend, B, broadcast):
    head = init_scoring_head(seed=1)
    task, traj = _inputs(B, broadcast, seed=7)
    weights = torch.rand(B, generator=torch.Generator().manual_seed(0))

    def grads(be):
        h = {k: v.clone().requires_grad_(True) for k, v in head.items()}
        t = task.clone().requires_grad_(True)
        x = traj.clone().requires_grad_(True)
        p = score_trajectories(t, x, h, backend=be)
        (p * weights).sum().backward()
        return [t.grad, x.grad] + [h[k].grad for k in head]

    for got, want in zip(grads(backend), grads("torch")):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("B", BATCHES)
def test_mean_pool_matches_reference(backend, B):
    g = torch.Generator().manual_seed(B)
    T = 9 if B < 257 else 5
    x = torch.randn(B, T, 384, generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    want = ref.mean_pool_l2norm(x, mask)
    got = mean_pool_l2norm(x, mask, backend=backend)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    torch.testing.assert_close(got.norm(dim=-1), torch.ones(B), atol=1e-5, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mean_pool_edge_cases(backend):
    x = torch.randn(3, 4, 19)
    mask = torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    got = mean_pool_l2norm(x, mask, backend=backend)
    torch.testing.assert_close(got, ref.mean_pool_l2norm(x, mask), atol=ATOL, rtol=0)
    assert torch.all(got[1] == 0)  # an all-padding row gives zeros, never NaN
    torch.testing.assert_close(got[0], torch.nn.functional.normalize(x[0, 0], dim=0), atol=ATOL, rtol=0)
    # gradient requests go through the reference and are exact
    xr = x.clone().requires_grad_(True)
    mean_pool_l2norm(xr, mask, backend=backend).sum().backward()
    assert xr.grad is not None and torch.isfinite(xr.grad).all()


def test_mean_pool_matches_sentence_transformers_pooling():
    from sentence_transformers.models import Normalize, Pooling

    x = torch.randn(5, 11, 384)
    mask = (torch.arange(11)[None, :] < torch.tensor([[11], [1], [6], [3], [9]])).long()
    feats = Pooling(384, pooling_mode="mean")({"token_embeddings": x, "attention_mask": mask})
    want = Normalize()(feats)["sentence_embedding"]
    for be in ["torch", *BACKENDS]:
        torch.testing.assert_close(mean_pool_l2norm(x, mask, backend=be), want, atol=ATOL, rtol=0)


def test_bad_input():
    head = init_scoring_head()
    task, traj = _inputs(3, False)
    for be in ["torch", *BACKENDS]:
        with pytest.raises(ValueError, match="task_emb: expected 1 or 3 rows"):
            score_trajectories(task[:2], traj, head, backend=be)
        with pytest.raises(ValueError, match=r"head\['l0.w'\]: expected 700 input columns"):
            score_trajectories(task[:, :316], traj, head, backend=be)
        with pytest.raises(ValueError, match="traj_emb: expected 2 dimensions"):
            score_trajectories(task, traj[0], head, backend=be)
        bad = dict(head)
        bad["l1.w"] = head["l1.w"].clone()
        bad["l1.w"][3, 4] = float("nan")
        with pytest.raises(ValueError, match=r"head\['l1.w'\]: contains NaN"):
            score_trajectories(task, traj, bad, backend=be)
        nan_traj = traj.clone()
        nan_traj[1, 2] = float("nan")
        with pytest.raises(ValueError, match="traj_emb: contains NaN"):
            score_trajectories(task, nan_traj, head, backend=be)
        with pytest.raises(TypeError, match="traj_emb: expected a floating"):
            score_trajectories(task, traj.long(), head, backend=be)
        with pytest.raises(ValueError, match="missing 'out.b'"):
            score_trajectories(task, traj, {k: v for k, v in head.items() if k != "out.b"}, backend=be)
        with pytest.raises(ValueError, match="mask: expected shape"):
            mean_pool_l2norm(torch.randn(2, 5, 8), torch.ones(2, 4), backend=be)
        with pytest.raises(ValueError, match="token_emb: expected 3 dimensions"):
            mean_pool_l2norm(torch.randn(5, 8), torch.ones(5), backend=be)
    with pytest.raises(ValueError, match="backend"):
        score_trajectories(task, traj, head, backend="gpu")
    if backends()["cuda"] is None:
        with pytest.raises(BackendUnavailable):
            score_trajectories(task, traj, head, backend="cuda")


def test_core_checks_raw_buffers():
    """The compiled entry points refuse bad buffers themselves (ValueError, never a crash)."""
    if "cpu" not in BACKENDS:
        pytest.skip("no compiled core")
    from metacog_fast import core

    head = init_scoring_head()
    ws = [head[k].numpy() for k in ("l0.w", "l1.w", "out.w")]
    bs = [head[k].numpy() for k in ("l0.b", "l1.b", "out.b")]
    traj = np.zeros((4, 384), np.float32)
    task = np.zeros((1, 384), np.float32)
    with pytest.raises(ValueError, match="traj_emb: expected dtype float32"):
        core().score_trajectories(task, traj.astype(np.float64), ws, bs)
    with pytest.raises(ValueError, match="C-contiguous"):
        core().score_trajectories(task, np.asfortranarray(np.zeros((4, 384), np.float32)), ws, bs)
    with pytest.raises(ValueError, match="task_emb: expected 1 or 4 rows"):
        core().score_trajectories(np.zeros((2, 384), np.float32), traj, ws, bs)
    with pytest.raises(ValueError, match="head layer 1 weight"):
        core().score_trajectories(task, traj, [ws[0], ws[0], ws[2]], bs)
    with pytest.raises(ValueError, match="mask"):
        core().mean_pool_l2norm(np.zeros((2, 3, 4), np.float32), np.zeros((2, 4), np.float32))
