"""Shared pytest configuration: deterministic torch on CPU, few threads (CI has 2 cores); code digests walked anew
after a test that patched a module (its cached digests describe the patched code)."""

import pytest
import torch

from testbed.util.codeprint import forget

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _fresh_digests_after_monkeypatch(request):
    yield
    if "monkeypatch" in request.fixturenames:
        forget()
