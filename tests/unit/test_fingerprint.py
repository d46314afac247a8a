"""The fingerprint's pure statistics on closed-form cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from testbed.stabilizers import fingerprint as fp


def test_cosine_closed_forms_and_zero_gradient_is_nan():
    a = torch.tensor([1.0, 0.0, 0.0])
    assert fp.cosine(a, torch.tensor([0.0, 2.0, 0.0])) == 0.0
    assert fp.cosine(a, 3 * a) == pytest.approx(1.0, abs=1e-12)
    assert fp.cosine(a, torch.tensor([1.0, 1.0, 0.0])) == pytest.approx(1 / math.sqrt(2), abs=1e-12)
    assert math.isnan(fp.cosine(a, torch.zeros(3)))


@pytest.mark.parametrize(("p", "df", "want"), [(0.95, 1, math.tan(0.45 * math.pi)), (0.95, 10, 1.812461),
                                               (0.95, 30, 1.697261), (0.975, 4, 2.776445)])
def test_t_quantile_matches_tables(p, df, want):
    assert fp.t_quantile(p, df) == pytest.approx(want, abs=2e-5)


def test_summarize_cosines_t_interval_and_nan_handling():
    s = fp.summarize_cosines(8, [0.1, 0.3, float("nan"), 0.2])
    assert s.pairs == 3 and s.mean == pytest.approx(0.2)
    half = 2.919986 * 0.1 / math.sqrt(3)  # t_{0.95, 2} * sd / sqrt(n)
    assert (s.ci_low, s.ci_high) == pytest.approx((0.2 - half, 0.2 + half), abs=1e-5)
    one = fp.summarize_cosines(8, [0.5])
    assert one.pairs == 1 and one.mean == 0.5 and math.isnan(one.ci_low)
    none = fp.summarize_cosines(8, [float("nan")])
    assert none.pairs == 0 and math.isnan(none.mean)


def test_disjoint_pairs_are_disjoint_and_counted():
    pairs = fp.disjoint_pairs(10, 2, seed=3)
    assert len(pairs) == 2
    used = [g for a, b in pairs for g in a + b]
    assert len(used) == len(set(used)) == 8


def test_minibatch_cosines_constructed_groups():
    # groups 0..3: two identical directions and two orthogonal; with m = one group per side:
    # identical groups -> 1, orthogonal -> 0, a zero gradient -> NaN (left out of the mean)
    e = torch.eye(4)
    same = torch.stack([e[0], e[0], e[0], e[0]])
    [c] = fp.minibatch_cosines(fp.gram_matrix(same), group_size=2, sizes=[2])
    assert c.pairs == 2 and c.mean == pytest.approx(1.0)
    ortho = torch.stack([e[0], e[1], e[2], e[3]])
    [c] = fp.minibatch_cosines(fp.gram_matrix(ortho), group_size=2, sizes=[2])
    assert c.mean == 0.0 and c.ci_low == 0.0 and c.ci_high == 0.0
    zero = torch.zeros(2, 4)
    [c] = fp.minibatch_cosines(fp.gram_matrix(zero), group_size=1, sizes=[1])
    assert c.pairs == 0 and math.isnan(c.mean)
    with pytest.raises(ValueError, match="not a positive multiple"):
        fp.minibatch_cosines(fp.gram_matrix(same), group_size=2, sizes=[3])


def _gaussian_groups(n: int, dim: int, b_groups: float, seed: int) -> torch.Tensor:
    """g_i = G + sigma z_i with |G| = 1 and tr(Sigma_g) = dim sigma^2 = b_groups: B (groups) = b_groups."""
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(dim, generator=gen, dtype=torch.float64)
    g /= g.norm()
    return g + math.sqrt(b_groups / dim) * torch.randn(n, dim, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noise_scale_recovered_on_gaussian_gradient_model(seed):
    # group size 4 and B_g = 16 groups: B_noise = 64 sequences; cos(m) = m / (m + 64).
    groups = _gaussian_groups(n=512, dim=4000, b_groups=16.0, seed=seed)
    gram = fp.gram_matrix(groups)
    sizes = [4, 16, 64, 256]
    cos = fp.minibatch_cosines(gram, group_size=4, sizes=sizes, seed=seed)
    for c in cos:
        assert c.ci_low - 0.05 <= c.m / (c.m + 64) <= c.ci_high + 0.05
    fit = fp.noise_scale_from_cosines([c.m for c in cos], [c.mean for c in cos], [c.pairs for c in cos])
    assert fit == pytest.approx(64, rel=0.05)  # 20 seeds: 63.1 .. 65.4
    direct = fp.noise_scale_from_gram(gram, group_size=4)
    assert direct["noise_scale"] == pytest.approx(64, rel=0.05)  # 20 seeds: 63.3 .. 64.9
    assert direct["grad_sq"] == pytest.approx(1.0, rel=0.05)


def test_sign_sketch_preserves_inner_products():
    groups = _gaussian_groups(n=16, dim=200_000, b_groups=4.0, seed=0).float()
    exact = fp.gram_matrix(groups)
    signs = fp.sketch_signs(groups.shape[1], seed=7)
    sk = fp.gram_matrix(torch.stack([fp.sign_sketch(g, 2**14, signs=signs) for g in groups]))
    assert torch.equal(fp.sign_sketch(groups[0], 2**14, seed=7), fp.sign_sketch(groups[0], 2**14, signs=signs))
    norms = torch.sqrt(torch.diagonal(exact))
    err = (sk - exact) / torch.outer(norms, norms)
    assert float(err.abs().max()) < 6 / math.sqrt(2**14)  # sd ~ 1 / sqrt(dim); 6 sd over 256 entries


def test_noise_scale_fit_edge_cases():
    assert math.isnan(fp.noise_scale_from_cosines([4, 8], [float("nan"), float("nan")]))
    assert fp.noise_scale_from_cosines([4, 8, 16], [0.0, 0.0, -0.01]) == math.inf
    exact = [m / (m + 10.0) for m in (2, 8, 32)]
    assert fp.noise_scale_from_cosines([2, 8, 32], exact) == pytest.approx(10.0, rel=1e-6)


def test_staleness_identical_policies():
    logp = -torch.rand(3, 5)
    mask = torch.ones(3, 5, dtype=torch.bool)
    s = fp.staleness_stats(logp, logp.clone(), mask, lag=2)
    assert s.lag == 2 and s.ess_seq == pytest.approx(1.0) and s.ess_token == pytest.approx(1.0)
    assert (s.logratio_q05, s.logratio_q50, s.logratio_q95, s.logratio_max, s.clip_frac) == (0, 0, 0, 0, 0)


def test_staleness_closed_form():
    # two sequences of two tokens; second token of sequence 1 masked.
    blogp = torch.zeros(2, 2)
    logp = torch.tensor([[math.log(2.0), 5.0], [0.0, math.log(0.5)]])
    mask = torch.tensor([[True, False], [True, True]])
    s = fp.staleness_stats(logp, blogp, mask, lag=1)
    # sequence ratios 2 and 0.5: (2.5)^2 / (2 * 4.25); token ratios 2, 1, 0.5: 3.5^2 / (3 * 5.25)
    assert s.ess_seq == pytest.approx(6.25 / 8.5)
    assert s.ess_token == pytest.approx(12.25 / 15.75)
    assert s.logratio_max == pytest.approx(math.log(2.0)) and s.logratio_q50 == 0.0
    assert s.clip_frac == pytest.approx(2 / 3)  # 2 and 0.5 are outside [0.8, 1.2]
    adv = torch.tensor([1.0, 1.0])  # positive advantages: only r > 1.2 counts
    assert fp.staleness_stats(logp, blogp, mask, lag=1, advantages=adv).clip_frac == pytest.approx(1 / 3)
    empty = fp.staleness_stats(logp, blogp, torch.zeros(2, 2, dtype=torch.bool), lag=1)
    assert math.isnan(empty.ess_seq) and math.isnan(empty.clip_frac)


def test_batch_health_statistics():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3])
    assert fp.zero_advantage_frac(rewards, groups) == pytest.approx(3 / 4)
    assert math.isnan(fp.zero_advantage_frac(torch.zeros(0), torch.zeros(0)))
    logits = torch.zeros(1, 2, 8)  # uniform over 8: entropy log 8
    logits[0, 1] = torch.tensor([100.0] + [0.0] * 7)  # one-hot: entropy 0 (masked out below)
    assert fp.mean_token_entropy(logits, torch.tensor([[True, False]])) == pytest.approx(math.log(8))
    assert fp.mean_token_entropy(logits, torch.tensor([[True, True]])) == pytest.approx(math.log(8) / 2, abs=1e-6)
    assert math.isnan(fp.mean_token_entropy(logits, torch.zeros(1, 2, dtype=torch.bool)))
    assert fp.truncated_frac(torch.tensor([True, False, False, False])) == 0.25


def _example() -> fp.Fingerprint:
    return fp.Fingerprint(
        model="m", task="t", cosine_by_minibatch=[fp.CosineAtSize(8, 0.1, float("nan"), float("nan"), 1)],
        noise_scale=math.inf, staleness=[fp.StalenessStats(0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0)],
        zero_advantage_frac=0.5, entropy=1.2, truncated_frac=0.0, command="cmd", date="2026-01-01T00:00:00Z",
        commit="abc", wall_s=3.0, extra={"k": 1})


def test_fingerprint_json_round_trip_is_standard_json():
    f = _example()
    text = f.to_json()
    d = json.loads(text)
    assert d["noise_scale"] == "inf" and d["cosine_by_minibatch"][0]["ci_low"] is None
    back = fp.Fingerprint.from_json(text)
    assert back.noise_scale == math.inf and math.isnan(back.cosine_by_minibatch[0].ci_low)
    assert back.to_json() == text


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.pop("entropy"), r"lacks the key\(s\) entropy"),
    (lambda d: d.update(bogus=1), r"unknown key\(s\) bogus"),
    (lambda d: d.update(model=3), "'model' must be a string"),
    (lambda d: d["staleness"][0].update(lag=1.5), r"staleness\[0\].lag must be an integer"),
    (lambda d: d["cosine_by_minibatch"][0].pop("pairs"), r"cosine_by_minibatch\[0\] must have exactly the keys"),
    (lambda d: d.update(entropy="high"), "entropy must be a number"),
])
def test_fingerprint_validation_one_line(edit, message):
    d = _example().to_dict()
    edit(d)
    with pytest.raises(fp.FingerprintError, match=message) as err:
        fp.Fingerprint.from_dict(d)
    assert "\n" not in str(err.value)


def test_fingerprint_load_names_the_file(tmp_path):
    bad = tmp_path / "f.json"
    bad.write_text("{not json")
    with pytest.raises(fp.FingerprintError, match=r"f\.json: not valid JSON"):
        fp.Fingerprint.load(str(bad))
    with pytest.raises(fp.FingerprintError, match="cannot read"):
        fp.Fingerprint.load(str(tmp_path / "missing.json"))
    good = tmp_path / "g.json"
    good.write_text(_example().to_json())
    assert fp.Fingerprint.load(str(good)).zero_advantage_frac == 0.5


def test_np_inputs_accepted():
    assert fp.summarize_cosines(4, np.array([0.2, 0.2])).ci_high == pytest.approx(0.2)


def test_newest_files_keeps_the_latest_measurement_of_each_model_and_task(tmp_path):
    def write(where, model, task, date=None):
        path = tmp_path / where
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"model": model, "task": task, **({"date": date} if date else {})}))
        return path

    first = write("a__t.json", "a", "t", "2026-01-01T00:00:00Z")
    again = write("seed1/a__t.json", "a", "t", "2026-02-01T00:00:00Z")
    undated = write("old/a__t.json", "a", "t")
    other = write("b__t.json", "b", "t", "2025-01-01T00:00:00Z")
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    assert fp.newest_files(tmp_path) == [(other, []), (again, [undated, first])]
    assert fp.newest_files(tmp_path / "absent") == []


def _rotating_gradients(seed: int, steps: int, dim: int, rho: float, r: float):
    """Mean gradients G_t with E cos(G_t, G_t+1) = rho, and two independent halves a_t, b_t per step with
    E a_t = E b_t = G_t / 2 and noise of the full gradient g_t = a_t + b_t at r = |G|^2 / tr(Sigma) (about r)."""
    rng = np.random.default_rng(seed)
    means = [rng.standard_normal(dim) / math.sqrt(dim)]
    for _ in range(steps - 1):
        means.append(rho * means[-1] + math.sqrt(1 - rho**2) * rng.standard_normal(dim) / math.sqrt(dim))
    means = np.array(means)
    sd = math.sqrt(1 / (2 * r * dim))  # each half's noise: tr = 1 / (2 r), the sum's 1 / r
    a = means / 2 + sd * rng.standard_normal((steps, dim))
    b = means / 2 + sd * rng.standard_normal((steps, dim))
    cross = [float((a[t] + b[t]) @ (a[t + 1] + b[t + 1])) for t in range(steps - 1)]
    halves = [float(a[t] @ b[t]) for t in range(steps)]
    true = sum(means[t] @ means[t + 1] for t in range(steps - 1)) / math.sqrt(
        sum(means[t] @ means[t] for t in range(steps - 1)) * sum(means[t] @ means[t] for t in range(1, steps)))
    naive = float(np.mean([fp.cosine(torch.tensor(a[t] + b[t]), torch.tensor(a[t + 1] + b[t + 1]))
                           for t in range(steps - 1)]))
    return cross, halves, float(true), naive


def test_split_half_cosine_is_the_ratio_of_sums_without_noise():
    rng = np.random.default_rng(0)
    g = rng.standard_normal((5, 7))
    cross = [float(g[t] @ g[t + 1]) for t in range(4)]
    halves = [float((g[t] / 2) @ (g[t] / 2)) for t in range(5)]  # |G_t|^2 / 4 > 0 at every step: resolved
    want = sum(cross) / math.sqrt(sum(float(x @ x) for x in g[:-1]) * sum(float(x @ x) for x in g[1:]))
    assert fp.consecutive_cosine_split_half(cross, halves) == pytest.approx(want, rel=1e-12)


def test_split_half_cosine_removes_the_noise_cap():
    # r = 0.1: two minibatch gradients' cosine is capped near rho r / (1 + r) = 0.08; the split-half estimate
    # reads the mean gradients' 0.9 (its ratio-of-sums bias at 200 steps is about -0.01)
    ests, naives = [], []
    for seed in range(6):
        cross, halves, true, naive = _rotating_gradients(seed, 200, 2000, 0.9, 0.1)
        assert true == pytest.approx(0.9, abs=0.02)
        ests.append(fp.consecutive_cosine_split_half(cross, halves))
        naives.append(naive)
    assert abs(np.mean(ests) - 0.9) < 0.04 and max(abs(e - 0.9) for e in ests) < 0.12
    assert np.mean(naives) < 0.9 * 0.1 / 1.1 + 0.02
    cross, halves, true, _ = _rotating_gradients(7, 200, 2000, 0.9, 1.0)  # r = 1: within 0.01
    assert fp.consecutive_cosine_split_half(cross, halves) == pytest.approx(true, abs=0.01)


def test_split_half_cosine_undefined_cases_are_nan():
    assert math.isnan(fp.consecutive_cosine_split_half([], [1.0]))
    assert math.isnan(fp.consecutive_cosine_split_half([1.0], [1.0]))  # a pair needs two halves' products
    assert math.isnan(fp.consecutive_cosine_split_half([1.0], [-1.0, 1.0]))  # mean gradient not resolved
    assert math.isnan(fp.consecutive_cosine_split_half([float("nan")], [1.0, 1.0]))
    # halves' products that scatter around 0 (t = 0.43 < 2): the mean gradient is not resolved and the ratio is no
    # cosine (it would be 4 x 1.5 / (4 x 0.8) = 1.875)
    halves = [1.0, -0.6, 1.0, -0.6, 1.0]
    assert math.isnan(fp.consecutive_cosine_split_half([1.5] * 4, halves))
    assert fp.consecutive_cosine_split_half([1.5] * 4, halves, min_t=0.0) == pytest.approx(1.875)


@pytest.mark.parametrize("df", [1, 2, 4, 9, 29, 200])
def test_t_quantile_is_the_statistics_module_s_within_its_stated_error(df):
    """The stabilizer layer's numpy-only t quantile (no scipy there) against testbed/util/stats.py's (scipy), within
    the 1e-6 its docstring states, over the levels the project reads."""
    from testbed.util import stats

    for p in (0.8, 0.9, 0.95, 0.975, 0.99, 0.995):
        assert abs(fp.t_quantile(p, df) - stats.t_quantile(p, df)) < 1e-6, (p, df)
