"""Contamination: DDG-4, in exact theory and measured on MNIST.

Theory (theory/delight.py, result 7; docs/ALGORITHMS.md): K = 5 actions, learner pi(y*) = 1 - delta,
a fraction rho of samples from an actor that always plays one wrong action, advantages +-1/2; the
expected update of pg, exact IS (each actor's own behaviour probabilities, and against the mixture)
and dg (eta = 1) through the real surrogates (`contamination_gradients`, `contamination_alignment`),
for delta from 0.5 down to 1e-4. Measured: on MNIST, the cosine of each update to the exact
expected-reward gradient on the same images (``cos_true_pg``, testbed/diagnostics.py) for pg, is and
dg at the largest delay of the MNIST sweep and under contamination (20% of actor chunks sampling
uniformly random labels while recording the clean log-probs), per seed averaged over the second half
of training.

Its parts: settings.py, evidence.py, judges.py and its figures' plot modules (figures/experiments/__init__.py).
"""

from __future__ import annotations

from figures.experiments.contamination.evidence import Evidence, measure
from figures.experiments.contamination.judges import CLAIMS
from figures.experiments.contamination.settings import NAME, configs, describe

__all__ = ["CLAIMS", "NAME", "Evidence", "configs", "describe", "measure"]
