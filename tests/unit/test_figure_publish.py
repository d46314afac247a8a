"""A figure's drawn files wait beside the output until its data file is written (figures/style.py save, publish)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from figures import style


def test_a_drawn_figure_appears_only_when_published(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    drawn = style.save(fig, tmp_path, "demo", "Tests none: a line | made by: test")
    assert sorted(p.name for p in tmp_path.iterdir()) == [style.PENDING]  # a stop here leaves no figure
    assert all(p.parent == tmp_path / style.PENDING and p.stat().st_size > 0 for p in drawn)
    published = style.publish(tmp_path, "demo")
    assert [p.name for p in published] == ["demo.png", "demo.pdf", "demo.caption.txt"]
    assert all(p.is_file() for p in published) and list((tmp_path / style.PENDING).iterdir()) == []
    assert (tmp_path / "demo.caption.txt").read_text() == "Tests none: a line | made by: test\n"
    assert style.publish(tmp_path, "demo") == []  # nothing pending: nothing moved
