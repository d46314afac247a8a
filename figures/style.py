"""One matplotlib style for every figure: Agg backend, fixed colours per method, PNG + PDF, a caption.

Every figure is saved by `save` as ``NAME.png`` and ``NAME.pdf`` with a caption line drawn under the
axes ("Tests CLAIM: ... | made by: COMMAND") and the same caption written beside it as
``NAME.caption.txt`` (the smoke test reads that file). Spread over seeds is drawn by `band`
(mean line, shaded min..max or +-1 standard error band).
"""

from __future__ import annotations

import os
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from testbed.util.stats import mean_se_finite

RC = {
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "font.size": 9,
    "axes.titlesize": 9.5,
    "axes.labelsize": 9,
    "legend.fontsize": 7.5,
    "legend.frameon": False,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.6,
    "pdf.fonttype": 42,
    "svg.fonttype": "none",
}
plt.rcParams.update(RC)

# One colour per method across every figure (tab10 order; the dg family is always red-ish).
COLORS = {
    "pg": "#7f7f7f",
    "is": "#1f77b4",
    "tis": "#17becf",
    "ppo": "#ff7f0e",
    "decoupled_ppo": "#8c564b",
    "vcpo": "#2ca02c",
    "gac": "#9467bd",
    "grpo": "#bcbd22",
    "pmpo": "#e377c2",
    "dg": "#d62728",
    "ce": "#000000",
    "pg_exact": "#7f7f7f",
    "dg_exact": "#d62728",
}
LABELS = {
    "pg": "PG (REINFORCE)",
    "is": "PG + exact IS",
    "tis": "truncated IS (c=2)",
    "ppo": "PPO (clip 0.2)",
    "decoupled_ppo": "decoupled PPO (AReaL)",
    "vcpo": "VCPO",
    "gac": "GAC (GRPO + projection)",
    "grpo": "GRPO (naive)",
    "pmpo": "PMPO",
    "dg": "DG (no correction)",
    "ce": "supervised CE oracle",
}
_EXTRA = ["#393b79", "#637939", "#8c6d31", "#843c39", "#17becf", "#e7969c"]


def color(name: str, index: int = 0) -> str:
    """The colour of a method (its base name before any ``(`` or ``+``), else a fixed fallback."""
    base = name.split("(")[0].split("+")[0].strip()
    return COLORS.get(name, COLORS.get(base, _EXTRA[index % len(_EXTRA)]))


def level_color(i: int, sync: bool = False) -> str:
    """Colour of the i-th level of a setting (a delay, a staleness level); black for the synchronous one."""
    return "#000000" if sync else _EXTRA[i % len(_EXTRA)]


def label(name: str) -> str:
    return LABELS.get(name, name)


def subplots(n: int = 1, ncols: int | None = None, width: float = 3.6, height: float = 2.9, **kw):
    """A grid of ``n`` panels (``ncols`` per row), sized for a caption line underneath."""
    ncols = ncols or n
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows + 0.55), squeeze=False, **kw)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def band(ax, x, values: np.ndarray, *, name: str = "", color_: str | None = None, kind: str = "se",
         label_: str | None = None, marker: str | None = None, linestyle: str = "-", alpha: float = 0.2) -> None:
    """Mean over seeds (rows of ``values`` [n_seeds, n_x]) with a shaded spread.

    ``kind="se"``: +-1 standard error; ``"minmax"``: the range over seeds. NaNs are ignored per column.
    """
    values = np.atleast_2d(np.asarray(values, dtype=float))
    x = np.asarray(x, dtype=float)
    mean, se = mean_se_finite(values)
    if kind == "minmax":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: NaN, drawn as a gap
            lo, hi = np.nanmin(values, axis=0), np.nanmax(values, axis=0)
    else:
        lo, hi = mean - se, mean + se
    c = color_ or color(name)
    ax.plot(x, mean, color=c, label=label_ if label_ is not None else label(name), marker=marker,
            linestyle=linestyle, markersize=3.5)
    if values.shape[0] > 1:
        ax.fill_between(x, lo, hi, color=c, alpha=alpha, linewidth=0)


def curve_panel(ax, series: dict[str, tuple[np.ndarray, np.ndarray]], *, x_scale: float = 1.0, title: str = "",
                xlabel: str = "", ylabel: str = "", ylim: tuple[float, float] | None = None) -> None:
    """One panel of learning curves: a `band` per named series ``{name: (x, values [n_seeds, n_x])}`` with x times
    ``x_scale`` (a series with no logged points is skipped), then the panel's title, axis labels and y range."""
    for name, (x, values) in series.items():
        if len(x):
            band(ax, np.asarray(x, dtype=float) * x_scale, values, name=name)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)


def seed_dots(ax, x, values: np.ndarray, *, name: str = "", color_: str | None = None) -> None:
    """One small dot per seed at each x (rows of ``values`` [n_seeds, n_x]); NaNs are skipped."""
    values = np.atleast_2d(np.asarray(values, dtype=float))
    xs = np.broadcast_to(np.asarray(x, dtype=float), values.shape)
    ok = np.isfinite(values)
    ax.plot(xs[ok], values[ok], ".", color=color_ or color(name), markersize=2, alpha=0.6, linestyle="none")


def seed_note(first_look: int, values: dict[str, np.ndarray]) -> str:
    """"N seeds", naming the series whose seeds a claim's sequential design added: ``values`` maps a series name
    to its per-seed values (rows: seeds, NaN where not trained); a series counts its most-trained column."""
    counts = {}
    for name, v in values.items():
        v = np.asarray(v, dtype=float)
        v = v[:, None] if v.ndim == 1 else v
        counts[name] = int(np.isfinite(v).sum(axis=0).max()) if v.size else 0
    more: dict[int, list[str]] = {}
    for name, n in counts.items():
        if n != first_look:
            more.setdefault(n, []).append(name)
    if not more:
        return f"{first_look} seeds"
    extra = "; ".join(f"{n} for {', '.join(names)}" for n, names in sorted(more.items()))
    return f"{first_look} seeds ({extra}, where a claim's sequential design added seeds)"


def paper_star(ax, x: float, y: float, *, name: str = "", color_: str | None = None) -> None:
    """A paper's reported value, translated into the plotted metric."""
    ax.plot([x], [y], marker="*", color=color_ or color(name), markeredgecolor="k", markeredgewidth=0.4,
            markersize=8, linestyle="none")


def caption_text(claims: Sequence[str], what: str, command: str) -> str:
    claim = ", ".join(claims) if claims else "none (diagnostic)"
    return f"Tests {claim}: {what} | made by: {command}"


PENDING = ".pending"  # where a figure's files wait for its data file (`publish`)
FILES = ("{}.png", "{}.pdf", "{}.caption.txt")


def save(fig, out_dir: Path, name: str, caption: str, meta_note: str | None = None) -> list[Path]:
    """Draw NAME.png, NAME.pdf and NAME.caption.txt into ``out_dir/.pending``; return the paths. `publish` moves
    them into ``out_dir`` once the figure's data file is written, so an interrupted run never leaves a figure
    without the data it shows."""
    out_dir = Path(out_dir) / PENDING
    out_dir.mkdir(parents=True, exist_ok=True)
    text = caption if meta_note is None else f"{caption}\n{meta_note}"
    width_in = fig.get_size_inches()[0]
    wrapped = "\n".join(textwrap.fill(line, width=max(60, int(width_in * 15))) for line in text.splitlines())
    n_lines = wrapped.count("\n") + 1
    fig.tight_layout(rect=(0, 0.035 + 0.03 * n_lines, 1, 1))
    fig.text(0.01, 0.005, wrapped, ha="left", va="bottom", fontsize=6.5, color="#333333", family="monospace")
    png, pdf, cap = (out_dir / pattern.format(name) for pattern in FILES)
    fig.savefig(png)
    fig.savefig(pdf)
    plt.close(fig)
    cap.write_text(text + "\n")
    return [png, pdf, cap]


def publish(out_dir: Path, name: str) -> list[Path]:
    """Move figure ``name``'s drawn files from ``out_dir/.pending`` into ``out_dir`` (each an atomic rename, after
    its data file is written); return the published paths."""
    out_dir = Path(out_dir)
    done = []
    for pattern in FILES:
        pending = out_dir / PENDING / pattern.format(name)
        if pending.is_file():
            os.replace(pending, out_dir / pattern.format(name))
            done.append(out_dir / pattern.format(name))
    return done
