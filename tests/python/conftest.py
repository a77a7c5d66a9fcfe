"""Setup shared by the Python suite."""
import os

import torch


def _share_the_cores() -> None:
    # Under pytest-xdist each worker is a process with torch's own pool of intra-op threads, by default one a core: n
    # workers then run n x cores threads on the cores, and the CPU reference computations (float64, the oracle of
    # every test) spin and wait on each other. Each worker takes its share of the cores instead.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


_share_the_cores()
