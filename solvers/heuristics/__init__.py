"""This project's own heuristics beyond DeepSeek's greedy, batched over layers in torch."""
