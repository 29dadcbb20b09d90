"""PNG plots of bench/run.py results (matplotlib, Agg backend): one figure per case."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.transforms  # noqa: E402

COLORS = {"eager": "#7f7f7f", "inductor": "#1f77b4", "tidal": "#d62728", "inductor:loop": "#ff7f0e"}


def _color(col):
    return COLORS.get(col["key"], COLORS.get(col["backend"]))


def _status_text(rec):
    st = rec.get("status", "?")
    if st == "failed":
        return f"failed\n{rec.get('error_type', '')}"
    return st


def _value(rec, key, scale=1.0):
    if rec.get("status") == "ok" and rec.get(key) is not None:
        return rec[key] * scale
    return None


def grouped_bars(ax, case, metric_key, scale, ylabel, log=False):
    rows, cols = case["rows"], case["columns"]
    width = 0.8 / max(len(cols), 1)
    for j, col in enumerate(cols):
        for i, row in enumerate(rows):
            rec = row["cells"].get(col["key"], {"status": "n/a"})
            x = i + (j - (len(cols) - 1) / 2) * width
            v = _value(rec, metric_key, scale)
            label = col["title"] if i == 0 else None
            if v is not None:
                ax.bar(x, v, width, color=_color(col), label=label)
                ax.text(x, v, f"{v:.3g}", ha="center", va="bottom", fontsize=7)
            else:
                ax.bar(x, 0, width, color=_color(col), label=label)
                ax.text(x, 0.02, _status_text(rec), rotation=90, ha="center", va="bottom", fontsize=7,
                        transform=matplotlib.transforms.blended_transform_factory(ax.transData, ax.transAxes))
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["label"] for r in rows], fontsize=8, rotation=10)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def lines(ax, case, xkey, metric_key, scale, ylabel, xlabel):
    for col in case["columns"]:
        xs, ys, bad = [], [], []
        for row in case["rows"]:
            rec = row["cells"].get(col["key"], {})
            v = _value(rec, metric_key, scale)
            if v is None:
                bad.append(f"{row['params'].get(xkey)}: {rec.get('status', '?')}")
            else:
                xs.append(row["params"][xkey])
                ys.append(v)
        statuses = {b.split(": ", 1)[1] for b in bad}
        if bad and not xs and len(statuses) == 1:
            bad = [statuses.pop()]
        label = col["title"] + (f" ({'; '.join(bad)})" if bad else "")
        ax.plot(xs, ys, marker="o", color=_color(col), label=label,
                linestyle="--" if "loop" in col["key"] else "-")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")


def plot_case(name, case, meta, out_dir) -> str:
    suffix = f"threads={meta['threads']}, device={meta['device']}" + (", --quick" if meta["quick"] else "")
    if name == "chunked_ce":
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        grouped_bars(axes[0], case, "time_s", 1e3, "median time (ms)")
        grouped_bars(axes[1], case, "peak_mem_mb", 1.0, "peak extra memory (MB)")
    else:
        fig, ax = plt.subplots(figsize=(8, 4.8))
        if name == "compile_time":
            lines(ax, case, "T", "compile_s", 1.0, "compile time (s)", "trip count T")
        elif name == "while_loop":
            lines(ax, case, "n", "iters_per_s", 1.0, "iterations / s", "trip count n")
            ax.set_xscale("log", base=10)
        elif name == "associative_scan":
            lines(ax, case, "T", "gb_per_s", 1.0, "effective GB/s", "sequence length T")
        else:
            grouped_bars(ax, case, "time_s", 1e3, "median time (ms)", log=(name == "rnn_scan"))
    fig.suptitle(f"{case['title']}\n({suffix})", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out_dir, f"{name}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(results, out_dir) -> list[str]:
    return [plot_case(name, case, results["meta"], out_dir) for name, case in results["cases"].items()]
