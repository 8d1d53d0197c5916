"""Dynamic-mode benchmarks: the heuristics on openb and the PPO agent on unseen traces."""
