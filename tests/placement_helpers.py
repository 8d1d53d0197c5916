"""A tiny openb-schema fleet and workload (14 nodes, 60 pods) for fast placement tests."""

from __future__ import annotations

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},{[32000, 64000, 96000][i % 3]},{[65536, 262144][i % 2]},{[1, 2, 4, 8][i % 4]},"
    f"{['T4', 'P100', 'V100M32'][i % 3]}\n"
    for i in range(14)
)
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
    f"p{i:03d},{1000 + 500 * (i % 5)},{2048 * (1 + i % 3)},{[0, 1, 1, 2, 1][i % 5]},"
    f"{[0, 300, 1000, 1000, 650][i % 5]}\n"
    for i in range(60)
)
