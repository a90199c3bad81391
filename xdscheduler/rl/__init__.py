"""Hierarchical multi-agent reinforcement learning of placements (RLlib, torch_geometric)."""
