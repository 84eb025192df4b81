"""The CI box has 2 cores shared by many tests: one torch thread avoids oversubscription."""

import torch

torch.set_num_threads(1)
