"""A small GPT in plain torch, and the corpus it learns: token streams of a seeded Markov chain
(each token has a few likely successors), so the loss falls from ln(vocab) toward the chain's
entropy and a run shows it learning without any data to download."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from xdscheduler.live.shape import GptShape


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.mlp = nn.Sequential(
            nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden)
        )
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        att = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, h))
        return x + self.mlp(self.norm2(x))


class Gpt(nn.Module):
    def __init__(self, shape: GptShape):
        super().__init__()
        self.embed = nn.Embedding(shape.vocab, shape.hidden)
        self.pos = nn.Parameter(torch.zeros(shape.seq, shape.hidden))
        self.blocks = nn.ModuleList(Block(shape.hidden, shape.heads) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.hidden)
        self.head = nn.Linear(shape.hidden, shape.vocab, bias=False)
        self.head.weight = self.embed.weight  # tied, as small GPTs are
        nn.init.normal_(self.embed.weight, std=0.02)  # GPT-2's: the first loss near ln(vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


class MarkovCorpus:
    """Sequences of a fixed random Markov chain: `branching` successors per token, drawn with
    skewed probabilities. Every (seed, step, rank) names one batch, so a resumed run sees the
    batches it would have seen."""

    def __init__(self, vocab: int, seed: int, branching: int = 4):
        g = torch.Generator().manual_seed(seed)
        self.next = torch.randint(vocab, (vocab, branching), generator=g)
        self.probs = torch.softmax(torch.randn(vocab, branching, generator=g) * 2, dim=1)
        self.vocab, self.seed = vocab, seed

    def batch(self, size: int, seq: int, step: int, rank: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(hash((self.seed, step, rank)) % 2**63)
        out = torch.empty(size, seq + 1, dtype=torch.long)
        out[:, 0] = torch.randint(self.vocab, (size,), generator=g)
        for t in range(seq):
            pick = torch.multinomial(self.probs[out[:, t]], 1, generator=g).squeeze(1)
            out[:, t + 1] = self.next[out[:, t], pick]
        return out

    def entropy(self) -> float:
        """The loss a perfect model would reach (nats per token, stationary mean of rows)."""
        return float(-(self.probs * self.probs.log()).sum(1).mean())

    @property
    def start_loss(self) -> float:
        return math.log(self.vocab)


def train(plan) -> None:
    """The built-in job: this GPT (the job's `model:` shape) learns the Markov corpus, on the
    plan's batch share and micro-batch (`live.plan`)."""
    import time

    from xdscheduler.live.training import accumulate

    model = Gpt(plan.model).to(plan.device)
    opt = torch.optim.AdamW(model.parameters(), lr=plan.lr)
    start = plan.resume(model, opt)
    corpus = MarkovCorpus(plan.model.vocab, plan.seed)
    for step in range(start, plan.steps):
        # the input pipeline, untimed: a step's time is its compute and synchronisation
        tokens = corpus.batch(plan.batch, plan.model.seq, step, plan.rank).to(plan.device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = accumulate(model, tokens, plan.micro_batch)
        plan.sync_gradients(model)
        opt.step()
        plan.outer_sync(model, step + 1)
        if not plan.step(step + 1, loss, time.perf_counter() - t0, model, opt):
            break
