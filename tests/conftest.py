"""Shared pytest configuration: deterministic torch on CPU, few threads (CI has 2 cores)."""

import torch

torch.set_num_threads(1)
