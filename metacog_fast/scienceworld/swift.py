"""Swift, the fast proposer: a learned action ranker (default) or the LLM with constrained choice.

Ranker score of candidate action ``a`` in context ``x`` (task, observation, last action):

    s(a, x) = c(a)^T W t(x) + u^T c(a) + v^T f(a, x)

``c(a)`` [HC] hashed words + verb of the action, ``t(x)`` [2*HT] hashed words of the task and of
observation+last action, ``f`` [NF] cheap interaction features (word overlap with task and
observation, times executed this episode, repeats the last action, verb flags). Trained by
imitation (softmax cross-entropy of the gold action against sampled valid actions) on the gold
paths of ``train`` variations. MiniLM per candidate was not used: ScienceWorld states have
hundreds to thousands of valid actions and the per-step budget is 5 ms.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from metacog_fast._atomic import atomic_open
from metacog_fast.scienceworld.text import hash_vec, tokens, verb

if TYPE_CHECKING:
    from metacog_fast.llm.protocol import LLM

HC = 256
HT = 256
NF = 8


@dataclass
class SwiftState:
    """What Swift sees at one step."""

    task: str
    """Task description."""
    observation: str
    """Last observation."""
    last_action: str
    """Previous executed action ("" at the start)."""
    valid: list[str]
    """Valid actions of the state."""
    executed: dict[str, int] = field(default_factory=dict)
    """Times each action was executed this episode."""
    boosts: dict[str, float] = field(default_factory=dict)
    """Additive logit boosts (T1 memory suggestions)."""


def _bin(text: str) -> np.ndarray:
    v = np.zeros(HC, np.float32)
    for t in tokens(text):
        v[zlib.crc32(("u:" + t).encode()) % HC] = 1.0
    return v


class FeatureCache:
    """Per-action-string feature rows, computed once: c [HC], binary words [HC], token count, verb flags."""

    def __init__(self, sets: int = 4) -> None:
        self.rows: dict[str, tuple[np.ndarray, np.ndarray, float, float, float]] = {}
        # stacked matrices of the last few action lists: a state's valid set often repeats
        self._sets: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._max_sets = sets

    def get(self, a: str) -> tuple[np.ndarray, np.ndarray, float, float, float]:
        r = self.rows.get(a)
        if r is None:
            vb = verb(a)
            c = hash_vec(a + " verb" + vb.replace(" ", ""), HC)
            r = (c, _bin(a), max(1.0, float(len(tokens(a)))), float(vb == "focus on"), float(vb in ("go to", "teleport to")))
            if len(self.rows) > 200_000:
                self.rows.clear()
            self.rows[a] = r
        return r

    def matrices(self, actions: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """C [N,HC], B [N,HC], ntok [N], flags [N,2] (read-only views when cached)."""
        key = tuple(actions)
        hit = self._sets.get(key)
        if hit is not None:
            return hit
        rows = [self.get(a) for a in actions]
        C = np.stack([r[0] for r in rows])
        B = np.stack([r[1] for r in rows])
        ntok = np.array([r[2] for r in rows], np.float32)
        flags = np.array([(r[3], r[4]) for r in rows], np.float32)
        out = (C, B, ntok, flags)
        if len(self._sets) >= self._max_sets:
            self._sets.pop(next(iter(self._sets)))
        self._sets[key] = out
        return out


def context_vec(task: str, observation: str, last_action: str) -> np.ndarray:
    """t(x) [2*HT]."""
    return np.concatenate([hash_vec(task, HT, "t:"), hash_vec(observation + " " + last_action, HT, "o:")])


def features(cache: FeatureCache, s: SwiftState, actions: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(C [N,HC], t [2*HT], F [N,NF]) for the candidates ``actions``."""
    C, B, ntok, flags = cache.matrices(actions)
    tb = _bin(s.task)
    ob = _bin(s.observation)
    F = np.zeros((len(actions), NF), np.float32)
    F[:, 0] = np.einsum("nh,h->n", B, tb) / ntok
    F[:, 1] = np.einsum("nh,h->n", B, ob) / ntok
    F[:, 5:7] = flags
    F[:, 7] = ntok / 10.0
    if s.executed or s.last_action:
        idx = {a: i for i, a in enumerate(actions)} if len(s.executed) > 0 else {}
        for a, n in s.executed.items():
            i = idx.get(a)
            if i is not None:
                F[i, 2] = np.log1p(n)
                F[i, 3] = 1.0
        j = idx.get(s.last_action) if idx else None
        if j is not None:
            F[j, 4] = 1.0
    return C, context_vec(s.task, s.observation, s.last_action), F


class RankerModel:
    """Parameters W [HC, 2*HT], u [HC], v [NF] and scoring."""

    def __init__(self, W: np.ndarray | None = None, u: np.ndarray | None = None, v: np.ndarray | None = None) -> None:
        self.W = np.zeros((HC, 2 * HT), np.float32) if W is None else W.astype(np.float32)
        self.u = np.zeros(HC, np.float32) if u is None else u.astype(np.float32)
        self.v = np.zeros(NF, np.float32) if v is None else v.astype(np.float32)
        for name, a, shape in (("W", self.W, (HC, 2 * HT)), ("u", self.u, (HC,)), ("v", self.v, (NF,))):
            if a.shape != shape or not np.isfinite(a).all():
                raise ValueError(f"ranker {name}: expected finite {shape}, got {a.shape}")

    def score(self, C: np.ndarray, t: np.ndarray, F: np.ndarray) -> np.ndarray:
        """[N] logits for C [N,HC], t [2*HT], F [N,NF]."""
        q = np.einsum("hk,k->h", self.W, t) + self.u
        return np.einsum("nh,h->n", C, q) + np.einsum("nf,f->n", F, self.v)

    def save(self, path: str) -> None:
        with atomic_open(path, "wb") as f:
            np.savez(f, W=self.W, u=self.u, v=self.v)

    @classmethod
    def load(cls, path: str) -> "RankerModel":
        if not os.path.exists(path):
            raise FileNotFoundError(f"ranker: no model file at {path}; train one with train_ranker()")
        with np.load(path) as z:
            missing = {"W", "u", "v"} - set(z.files)
            if missing:
                raise ValueError(f"ranker: {path} lacks arrays {sorted(missing)}")
            return cls(z["W"], z["u"], z["v"])


def ranker_scores_reference(model: RankerModel, C: Any, t: Any, F: Any) -> Any:
    """Readable torch reference of :meth:`RankerModel.score` (used for training and tests)."""
    import torch

    W = torch.as_tensor(model.W)
    u = torch.as_tensor(model.u)
    v = torch.as_tensor(model.v)
    return torch.as_tensor(C) @ (W @ torch.as_tensor(t) + u) + torch.as_tensor(F) @ v


@dataclass
class GoldExample:
    """One gold step: the state Swift saw and the expert's action."""

    task: str
    observation: str
    last_action: str
    valid: list[str]
    executed: dict[str, int]
    gold: str


def train_ranker(examples: list[GoldExample], epochs: int = 60, negatives: int = 48, lr: float = 0.02,
                 seed: int = 0) -> tuple[RankerModel, dict[str, float]]:
    """Imitation training: softmax CE of the gold action vs ``negatives`` sampled valid actions."""
    import torch

    if not examples:
        raise ValueError("examples: no gold steps to train on (collect gold paths of train variations first)")
    rng = np.random.default_rng(seed)
    cache = FeatureCache()
    Cs, Ts, Fs = [], [], []
    for ex in examples:
        others = [a for a in ex.valid if a != ex.gold]
        if len(others) > negatives:
            # half hard negatives (same verb as gold), half uniform
            same = [a for a in others if verb(a) == verb(ex.gold)]
            k = min(len(same), negatives // 2)
            pick = list(rng.choice(same, k, replace=False)) if k else []
            rest = [a for a in others if a not in set(pick)]
            pick += list(rng.choice(rest, negatives - k, replace=False))
            others = pick
        while len(others) < negatives:
            others.append(others[-1] if others else ex.gold)
        st = SwiftState(ex.task, ex.observation, ex.last_action, ex.valid, ex.executed)
        C, t, F = features(cache, st, [ex.gold] + others)
        Cs.append(C)
        Ts.append(t)
        Fs.append(F)
    C = torch.as_tensor(np.stack(Cs))  # [S, 1+K, HC]
    T = torch.as_tensor(np.stack(Ts))  # [S, 2HT]
    F = torch.as_tensor(np.stack(Fs))  # [S, 1+K, NF]
    torch.manual_seed(seed)
    W = torch.zeros(HC, 2 * HT, requires_grad=True)
    u = torch.zeros(HC, requires_grad=True)
    v = torch.zeros(NF, requires_grad=True)
    opt = torch.optim.Adam([W, u, v], lr=lr)
    target = torch.zeros(C.shape[0], dtype=torch.long)
    loss = torch.tensor(0.0)
    for _ in range(epochs):
        opt.zero_grad()
        logits = torch.einsum("skh,sh->sk", C, T @ W.T + u) + F @ v
        loss = torch.nn.functional.cross_entropy(logits, target) + 1e-4 * (W * W).sum()
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits = torch.einsum("skh,sh->sk", C, T @ W.T + u) + F @ v
        acc = float((logits.argmax(1) == 0).float().mean())
    model = RankerModel(W.detach().numpy(), u.detach().numpy(), v.detach().numpy())
    return model, {"train_loss": float(loss.detach()), "train_top1_sampled": acc, "steps": float(len(examples))}


class RankerSwift:
    """Swift as the learned ranker."""

    name = "ranker"

    def __init__(self, model: RankerModel) -> None:
        self.model = model
        self.cache = FeatureCache()
        self._memo: tuple[SwiftState, np.ndarray] | None = None  # the last state's logits (margin, then choice)

    def scores(self, s: SwiftState) -> np.ndarray:
        """[N] logits over ``s.valid`` (T1 boosts added); the same state object is scored once."""
        if self._memo is not None and self._memo[0] is s:
            return self._memo[1].copy()
        z = self._scores(s)
        self._memo = (s, z)
        return z.copy()

    def _scores(self, s: SwiftState) -> np.ndarray:
        C, t, F = features(self.cache, s, s.valid)
        z = self.model.score(C, t, F)
        if s.boosts:
            for i, a in enumerate(s.valid):
                b = s.boosts.get(a)
                if b:
                    z[i] += b
        return z

    def candidates(self, s: SwiftState, k: int) -> list[str]:
        z = self.scores(s)
        k = min(k, len(z))
        top = np.argpartition(-z, k - 1)[:k]
        return [s.valid[i] for i in top[np.argsort(-z[top], kind="stable")]]

    def propose(self, s: SwiftState) -> str:
        return self.candidates(s, 1)[0]


def lexical_scores(cache: FeatureCache, s: SwiftState) -> np.ndarray:
    """Untrained prefilter: overlap with task and observation, minus repeats."""
    _, _, F = features(cache, s, s.valid)
    z = F[:, 0] + 0.5 * F[:, 1] - 0.5 * F[:, 2] - 1.0 * F[:, 4]
    if s.boosts:
        for i, a in enumerate(s.valid):
            z[i] += s.boosts.get(a, 0.0)
    return z


def swift_prompt(s: SwiftState) -> str:
    """The text the LLM Swift continues with one of its options (:func:`swift_option`) at state ``s``;
    the ScienceWorld SFT dataset (``metacog_fast.scienceworld.finetune_data``) trains on exactly it."""
    return (f"You are solving a science task in a text world.\nTask: {s.task.strip()[:400]}\n"
            f"Last action: {s.last_action or 'none'}\nObservation: {s.observation.strip()[:300]}\n"
            "Next action:")


def swift_option(action: str) -> str:
    """The continuation of :func:`swift_prompt` whose log-likelihood scores ``action``."""
    return " " + action


PREFILTERS = ("lexical", "ranker")


class LLMSwift:
    """Swift as the LLM with constrained choice over a top-k of the valid actions: the lexical
    prefilter (default) or, when ``ranker`` is given, the learned ranker's top-k."""

    name = "llm"

    def __init__(self, llm: LLM, k: int = 8, ranker: RankerSwift | None = None) -> None:
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k: expected an int >= 1, got {k!r}")
        self.llm = llm
        self.k = k
        self.ranker = ranker
        self.cache = FeatureCache()

    @property
    def prefilter(self) -> str:
        """Which candidates the LLM chooses among: "lexical" or "ranker"."""
        return "lexical" if self.ranker is None else "ranker"

    def candidates(self, s: SwiftState, k: int) -> list[str]:
        if self.ranker is not None:
            return self.ranker.candidates(s, k)
        z = lexical_scores(self.cache, s)
        k = min(k, len(z))
        top = np.argpartition(-z, k - 1)[:k]
        return [s.valid[i] for i in top[np.argsort(-z[top], kind="stable")]]

    def prompt(self, s: SwiftState) -> str:
        return swift_prompt(s)

    def propose(self, s: SwiftState) -> str:
        opts = self.candidates(s, self.k)
        return opts[self.llm.choose(self.prompt(s), [swift_option(a) for a in opts]).index]
