"""The report's plots: matplotlib without a display, drawn for print, embedded as PNG."""

from __future__ import annotations

import io

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


def partition_png(counts: np.ndarray, title: str = "", names: list[str] | None = None) -> bytes:
    """The clients x classes label counts as a heatmap (a row per client); ``names``: the
    classes' names for the axis (their indices without)."""
    plt = pyplot()
    clients, classes = counts.shape
    height = min(9.0, max(2.5, 0.28 * clients + 1.5))
    width = min(10.0, max(6.5, 0.5 * classes + 2.5))  # room for the title's run name
    fig, ax = plt.subplots(figsize=(width, height))
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
    ax.set_title(title or "Label counts per client", fontsize=10)
    fig.tight_layout()
    return png_bytes(fig)
