"""The report's plots: matplotlib without a display, drawn for print, embedded as PNG."""

from __future__ import annotations

import io
import textwrap

import numpy as np

from .run_folder import column

DPI = 100


MAX_ANNOTATED = 20  # heatmaps with at most this many rows and columns print their counts


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


LINESTYLES = ("-", "--", "-.", ":")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig) -> bytes:
    """The figure as PNG (no software metadata), closed."""
    plt = pyplot()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def style(i: int) -> dict:
    """Line ``i``'s marker and dash pattern: lines stay apart in black and white."""
    return {
        "marker": MARKERS[i % len(MARKERS)],
        "linestyle": LINESTYLES[(i // len(MARKERS) + i) % len(LINESTYLES)],
        "markersize": 4,
    }


def curves_axis(ax, rows: list[dict], curves, ylabel: str, title: str) -> int:
    """Draw the ``curves`` (column, label) that have values; the number drawn."""
    drawn = 0
    for key, label in curves:
        rounds, values = column(rows, key)
        if values:
            ax.plot(rounds, values, label=label, **style(drawn))
            drawn += 1
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    integer_ticks(ax)
    if drawn:
        ax.legend(fontsize=7, loc="best")
    return drawn


def integer_ticks(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def fit_text(text, room: float, along: str = "width") -> None:
    """Wrap the matplotlib ``Text`` at spaces, in as few lines as fit, until its extent
    (pixels: ``along`` "width", or "height" for a rotated label) is at most ``room``; a single
    word longer than that stays as it is."""
    renderer = text.get_figure(root=True).canvas.get_renderer()
    whole = " ".join(text.get_text().split())
    tried = None
    for width in range(len(whole), 0, -1):
        lines = "\n".join(textwrap.wrap(whole, width, break_long_words=False))
        if lines == tried:
            continue
        text.set_text(tried := lines)
        if getattr(text.get_window_extent(renderer), along) <= room:
            return


TITLE_MARGIN = 0.96  # a fitted title spans at most this fraction of the figure's width


def partition_figure(counts: np.ndarray, title: str = "", names: list[str] | None = None):
    """The clients x classes label counts as a heatmap (a row per client); ``names``: the
    classes' names for the axis (their indices without). The title and the colour bar's
    label wrap to fit the figure, however many clients and classes (and however long the
    run's name)."""
    plt = pyplot()
    clients, classes = counts.shape
    height = min(9.0, max(3.0, 0.28 * clients + 1.5))
    width = min(10.0, max(6.5, 0.5 * classes + 2.5))
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    image = ax.imshow(counts, cmap="Blues", aspect="auto", interpolation="nearest")
    bar = fig.colorbar(image, ax=ax)
    bar.set_label("samples in the client's partition")
    ax.set_xlabel("class")
    ax.set_ylabel("client (partition id)")
    if classes <= 30:
        ax.set_xticks(range(classes))
        if names and len(names) == classes and any(n != str(k) for k, n in enumerate(names)):
            shown = [n if len(n) <= 14 else n[:13] + "…" for n in names]
            ax.set_xticks(
                range(classes),
                shown,
                rotation=30 if classes > 2 else 0,
                ha="right" if classes > 2 else "center",
                fontsize=8,
            )
    if clients <= 40:
        ax.set_yticks(range(clients))
    if clients <= MAX_ANNOTATED and classes <= MAX_ANNOTATED:
        top = counts.max() if counts.size else 0
        for (i, j), value in np.ndenumerate(counts):
            dark = top and value > 0.6 * top
            ax.text(
                j, i, str(value), ha="center", va="center", fontsize=7,
                color="white" if dark else "black",
            )  # fmt: skip
    heading = fig.suptitle(title or "Label counts per client", fontsize=10)
    fit_text(heading, TITLE_MARGIN * fig.bbox.width)
    fig.draw_without_rendering()  # the layout: the colour bar's length with the title's lines
    fit_text(bar.ax.yaxis.label, bar.ax.bbox.height, along="height")
    return fig


def partition_png(counts: np.ndarray, title: str = "", names: list[str] | None = None) -> bytes:
    """``partition_figure`` as PNG."""
    return png_bytes(partition_figure(counts, title, names))
