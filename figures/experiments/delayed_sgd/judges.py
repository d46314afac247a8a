"""The delayed_sgd experiment's claims: their margins, preconditions and judges (figures/records.py); no plotting."""

from __future__ import annotations

CLAIMS: tuple = ()
