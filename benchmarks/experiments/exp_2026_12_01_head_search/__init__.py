"""Cross-entropy search of the released fgd-mode network's logit head (formerly ``rl/head_search.py``).

A probe of whether searching the deployed network's last layer on whole-episode metrics beats the
behaviour-cloned head; see ``docs/ppo.md`` (head search). Driven by
``benchmarks/placement_teacher_search.py head-search``; tested by ``tests/test_ppo_head_search.py``.
The released models do not use it: they load through :mod:`fleetmind.rl.export`.
"""
