"""The policy network: a GATv2 encoder of the resource graph scoring each masked choice.

The graph arrives padded (RLlib's new stack has no graph spaces); `forward` rebuilds one
disjoint torch_geometric batch from it. Each choice is scored from its own features, the
embeddings of the domains it uses (weighted by its share of accelerators there), the whole
graph and the job's context, so the same network ranks any number of allocations or plans.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn import GATv2Conv

from xdscheduler.perception.graph import edges, node_features
from xdscheduler.planner.view import ClusterView

MASKED = -1e9  # logit of a choice that is not open


def graph_data(view: ClusterView) -> Data:
    """The resource graph as a torch_geometric `Data` (x, edge_index, edge_attr)."""
    index, feats = edges(view)
    return Data(
        x=torch.from_numpy(node_features(view)),
        edge_index=torch.from_numpy(index),
        edge_attr=torch.from_numpy(feats),
    )


def graph_layers(hidden: int, heads: int, edge_features: int, layers: int) -> nn.ModuleList:
    """The encoder's message-passing rounds: GATv2 layers of `hidden` features."""
    convs = nn.ModuleList(
        GATv2Conv(hidden, hidden, heads=heads, concat=False, edge_dim=edge_features)
        for _ in range(layers)
    )
    _drop_generated_sources()
    return convs


def _drop_generated_sources() -> None:
    """torch_geometric writes each layer type's generated `propagate` into the system temp
    folder to import it, once a process, and leaves the file there: every Ray worker, Serve
    replica and test process would leave two. Imported, they are not read again."""
    tmp = tempfile.gettempdir()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) if name.startswith("torch_geometric.") else None
        if path and os.path.dirname(path) == tmp:  # strings: thousands of modules a build
            Path(path).unlink(missing_ok=True)


class GraphChoiceModule(TorchRLModule, ValueFunctionAPI):
    """model_config: hidden (width, default 64), layers (message-passing rounds, 2), heads (2),
    prior_feature and prior_scale (the choice feature the untrained policy ranks by, and how
    sharply; none by default)."""

    def setup(self):
        cfg = self.model_config or {}
        hidden, heads = int(cfg.get("hidden", 64)), int(cfg.get("heads", 2))
        space = self.observation_space
        node_f, edge_f = space["nodes"].shape[-1], space["edges"].shape[-1]
        choice_f, context_f = space["choices"].shape[-1], space["context"].shape[-1]
        self.node_in = nn.Linear(node_f, hidden)
        self.convs = graph_layers(hidden, heads, edge_f, int(cfg.get("layers", 2)))
        self.score = nn.Sequential(
            nn.Linear(choice_f + 2 * hidden + context_f, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )
        self.value = nn.Sequential(
            nn.Linear(hidden + context_f + choice_f, hidden), nn.Tanh(), nn.Linear(hidden, 1)
        )
        # A linear path from the choice's own terms: ranking by the objective is learnt in a
        # few updates, the network around it learns when the graph says otherwise.
        self.direct = nn.Linear(choice_f, 1)
        for layer in (self.score[-1], self.direct):  # near-uniform choices at the start
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)
        if cfg.get("prior_feature") is not None:  # or a prior: start from a known ranking
            with torch.no_grad():
                self.direct.weight[0, int(cfg["prior_feature"])] = float(cfg["prior_scale"])

    def encode(self, obs: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Node embeddings (B, N, H) and a graph embedding (B, H)."""
        b, n, _ = obs["nodes"].shape
        x = self.node_in(obs["nodes"].reshape(b * n, -1))
        e = obs["edge_index"].shape[-1]
        offset = (torch.arange(b, device=x.device) * n).view(b, 1, 1)
        index = (obs["edge_index"].long() + offset).permute(1, 0, 2).reshape(2, b * e)
        keep = obs["edge_mask"].reshape(b * e) > 0.5
        index, attr = index[:, keep], obs["edges"].reshape(b * e, -1)[keep]
        for conv in self.convs:
            x = x + torch.relu(conv(x, index, attr))
        mask = obs["node_mask"].unsqueeze(-1)
        nodes = x.view(b, n, -1) * mask
        return nodes, nodes.sum(1) / mask.sum(1).clamp(min=1)

    def _forward(self, batch, **kwargs):
        obs = batch[Columns.OBS]
        nodes, graph = self.encode(obs)
        choices, k = obs["choices"], obs["choices"].shape[1]
        where = obs["choice_nodes"] @ nodes
        context = obs["context"]
        inputs = torch.cat(
            [
                choices,
                where,
                graph.unsqueeze(1).expand(-1, k, -1),
                context.unsqueeze(1).expand(-1, k, -1),
            ],
            dim=-1,
        )
        logits = (self.score(inputs) + self.direct(choices)).squeeze(-1)
        open_ = obs["action_mask"] > 0.5
        logits = torch.where(open_, logits, torch.full_like(logits, MASKED))
        mean_choice = (choices * open_.unsqueeze(-1)).sum(1) / open_.sum(1, keepdim=True).clamp(
            min=1
        )
        embeddings = torch.cat([graph, context, mean_choice], dim=-1)
        return {Columns.ACTION_DIST_INPUTS: logits, Columns.EMBEDDINGS: embeddings}

    def compute_values(self, batch, embeddings=None):
        if embeddings is None:
            embeddings = self._forward(batch)[Columns.EMBEDDINGS]
        return self.value(embeddings).squeeze(-1)
