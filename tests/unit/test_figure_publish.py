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


def test_the_protocol_line_names_a_later_registration():
    """A later registration's report names its file, its claims and the file whose rules it inherits (and the rule
    sections it restates); the first registration's keeps its line."""
    from figures.publish import _header

    def line(pr):
        stamp = {"date": "d", "commit": "c", "wall_s": 1.0, "workers": 1, "cpu_count": 2, "label": "confirmatory",
                 "preregistration": pr, "seed_block": [10100, 10199]}
        return next(x for x in _header({"stamp": stamp, "setting": "full", "command": "x"}) if x.startswith("Protocol"))

    first = line({"sha256": "a" * 64, "commit": "c1", "file": "figures/preregistration.toml"})
    assert "Pre-registration figures/preregistration.toml, sha256 `aaaaaaaaaaaaaaaa`" in first
    later = line({"sha256": "b" * 64, "commit": "c2", "file": "figures/registrations/x.toml", "claims": ["DG-1"],
                  "supersedes": "figures/preregistration.toml"})
    assert ("Later registration figures/registrations/x.toml (claims DG-1; every rule of figures/preregistration.toml)"
            in later) and "10100..10199" in later
    restated = line({"sha256": "b" * 64, "commit": "c3", "file": "figures/registrations/y.toml", "claims": ["VCPO-1"],
                     "supersedes": "figures/preregistration.toml", "rules": ["spike"]})
    assert "(claims VCPO-1; the rules of figures/preregistration.toml but its [spike], restated)" in restated
