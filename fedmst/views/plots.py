"""Draw a run folder (or a ``fedmst compare`` folder) as a picture of the network.

Numbers in ``links.csv`` say how much each link carried; a picture says *where*: the star of
SPFF piles copies onto the links next to G, the MST tree spreads one copy over each link. Each
panel shows the topology with every link coloured and sized by the bytes it carried, G, the
local models and the aggregation nodes, and the task's broadcast and upload transfers drawn as
arrows along their physical paths. A compare folder gets one panel per scheduler, in its order,
with the same node positions and colour scale, so the panels can be read side by side.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import networkx as nx

from fedmst.core.topology import load_topology, node_order
from fedmst.errors import FedmstError
from fedmst.run.report import Summary, size_label, size_unit
from fedmst.run.results import read_csv, read_links
from fedmst.views.links import COMPARISON, check_measured, compare_runs, rate_series, run_labels, scheduler_label

SCHEDULER_COLOURS = {"spff": "tab:red", "mst": "tab:blue"}
"""Fixed colours of the two built-in schedulers in every figure; the others take ``COLOUR_CYCLE`` in turn."""
COLOUR_CYCLE = ("tab:green", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan",
                "tab:gray")
MAX_COLUMNS = 3
"""Panels per row of a compare folder's picture: more schedulers wrap onto further rows."""
RUN_FILES = ("config.json", "plan.json", "links.csv")
PHASE_STYLE = {
    "broadcast": {"color": "tab:blue", "linestyle": "-", "label": "broadcast (G → local models)"},
    "upload": {"color": "tab:red", "linestyle": (0, (4, 2)), "label": "upload (local models → G)"},
}
_COORDS = (("x", "y"), ("lon", "lat"), ("Longitude", "Latitude"), ("longitude", "latitude"))
_NODE_PT = 12.0
"""Radius of a node marker in points; arrows stop this far from a node's centre."""
_MIN_W, _MAX_W = 1.5, 9.0
"""Link widths in points for 0 bytes and for the busiest link of all panels."""


def plot_run(run_dir: Path, out: Path | None = None, *, task: str | None = None) -> Path:
    """Draw the run folder or compare folder ``run_dir`` as a PNG and return its path.

    ``out`` defaults to ``run_dir / "links.png"``. A folder that is neither a run folder nor a
    compare folder (see :func:`fedmst.views.links.compare_runs`) raises :class:`FedmstError`.
    """
    run_dir = Path(run_dir)
    runs = _find_runs(run_dir)
    labels = run_labels(runs)
    panels = [_load_run(run, task, labels[name]) for name, run in runs]
    names = {p["topology_name"] for p in panels}
    if len(names) > 1:
        raise FedmstError(f"{run_dir}: runs use different topologies ({', '.join(sorted(names))}); cannot compare")
    graph = panels[0]["graph"]
    pos = _layout(graph)
    busiest = max([max(p["link_bytes"].values(), default=0) for p in panels] + [1])
    unit, scale = size_unit(busiest)
    vmax = busiest / scale

    import matplotlib
    from matplotlib import cm, colors

    plt = _pyplot()

    greys = matplotlib.colormaps["Greys"]([i / 10 for i in range(2, 11)])
    cmap = colors.LinearSegmentedColormap.from_list("links", greys)  # no near-white: idle links stay visible
    norm = colors.Normalize(vmin=0, vmax=vmax)
    rows = math.ceil(len(panels) / MAX_COLUMNS)
    columns = math.ceil(len(panels) / rows)  # 4 panels: 2 x 2, not 3 + 1
    fig, axes = plt.subplots(rows, columns, figsize=(6.4 * columns + 1.2, 6.6 * rows), squeeze=False)
    try:
        for ax in axes.flat[len(panels):]:
            ax.axis("off")
        for ax, panel in zip(axes.flat, panels):
            _draw_panel(ax, panel, pos, cmap, norm, (unit, scale))
        bar = fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=list(axes.flat), fraction=0.035, pad=0.02)
        bar.set_label(f"{unit} carried per link (both directions, all rounds)")
        fig.legend(handles=_legend_handles(), loc="lower center", ncol=5 if len(panels) > 1 else 3,
                   frameon=False, fontsize=9)
        out = Path(out) if out is not None else run_dir / "links.png"
        _save(fig, out, dpi=150, bbox_inches="tight")
    finally:
        plt.close(fig)
    return out


def _save(fig: Any, out: Path, **options: Any) -> None:
    """Write ``fig`` to ``out``; a folder that cannot be written is one :class:`FedmstError` line."""
    try:
        fig.savefig(out, **options)
    except OSError as exc:
        raise FedmstError(f"{out}: cannot write: {exc.strerror or exc}") from exc


def _find_runs(run_dir: Path) -> list[tuple[str, Path]]:
    """The runs to draw as (scheduler, folder): ``run_dir`` itself (its scheduler as config.json
    names it), or a compare folder's runs in its order, less those with nothing to draw yet (a
    compare still running or interrupted)."""
    check_measured(run_dir)
    if _is_run(run_dir):
        return [(str(_read_json(run_dir / "config.json").get("scheduler") or run_dir.name), run_dir)]
    runs = compare_runs(run_dir)
    drawable = [(name, run) for name, run in runs if _is_run(run)]
    if not drawable:
        raise FedmstError(
            f"{run_dir}: neither a run folder ({', '.join(RUN_FILES)}) nor a compare folder "
            + (f"with a finished run ({', '.join(str(run) for _, run in runs)} lack {' or '.join(RUN_FILES)})" if runs
               else f"({COMPARISON}, or two or more run folders inside)")
        )
    return drawable


def _is_run(path: Path) -> bool:
    return all((path / f).is_file() for f in RUN_FILES)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise FedmstError(f"{path}: cannot read JSON: {' '.join(str(exc).split())}") from exc
    if not isinstance(data, dict):
        raise FedmstError(f"{path}: expected a JSON object")
    return data


def _load_run(run: Path, task: str | None, label: str) -> dict[str, Any]:
    """Everything one panel needs, checked against the topology so a stale file fails loudly;
    ``task`` None draws the first task of the plan; ``label`` titles the panel (:func:`run_labels`).

    summary.json is optional (a run still going has none): the title then says latency n/a.
    """
    config, workload = _read_json(run / "config.json"), _read_json(run / "plan.json")
    summary = Summary.read(run / "summary.json") if (run / "summary.json").is_file() else None
    if "topology" not in config:
        raise FedmstError(f"{run / 'config.json'}: no 'topology'")
    graph = load_topology(str(config["topology"]))
    plans = {p.get("task"): p for p in workload.get("tasks", []) if isinstance(p, dict)}
    task = next(iter(plans), None) if task is None else task
    if task not in plans:
        raise FedmstError(f"{run / 'plan.json'}: has no task {task!r} (tasks: {', '.join(map(str, plans)) or 'none'})")
    plan = plans[task]
    link_bytes: Counter[frozenset[str]] = Counter({frozenset(e): 0 for e in graph.edges})
    for row in read_links(run / "links.csv"):
        key = frozenset((row.src, row.dst))
        if key not in link_bytes:
            raise FedmstError(f"{run / 'links.csv'}: link {row.src}-{row.dst} is not in the topology")
        link_bytes[key] += row.measured_bytes
    transfers = plan.get("transfers", [])
    for t in transfers:
        path = t.get("path", [])
        if t.get("phase") not in PHASE_STYLE or any(not graph.has_edge(a, b) for a, b in zip(path, path[1:])):
            raise FedmstError(f"{run / 'plan.json'}: transfer {t} is not a broadcast/upload along topology links")
    return {
        "label": label,
        "topology_name": graph.graph.get("name", str(config["topology"])),
        "graph": graph,
        "global_node": plan.get("global_node"),
        "local_counts": Counter(plan.get("local_nodes", [])),
        "aggregation_nodes": set(plan.get("aggregation_nodes", [])),
        "transfers": transfers,
        "link_bytes": link_bytes,
        "latency_s": summary.round_latency_s if summary else None,
    }


def _layout(graph: nx.Graph) -> dict[str, tuple[float, float]]:
    """Node positions: the graph's own coordinates if every node has them, else Kamada-Kawai
    (links of equal length, few crossings) started from a circle in node order, which makes it
    deterministic, so reruns and both panels of a compare agree."""
    for xk, yk in _COORDS:
        if all(xk in d and yk in d for _, d in graph.nodes(data=True)):
            return {n: (float(d[xk]), float(d[yk])) for n, d in graph.nodes(data=True)}
    nodes = sorted(graph, key=node_order)
    plain = nx.Graph()
    plain.add_nodes_from(nodes)
    plain.add_edges_from(sorted(tuple(sorted(e, key=node_order)) for e in graph.edges))
    circle = {n: (math.cos(2 * math.pi * i / len(nodes)), math.sin(2 * math.pi * i / len(nodes)))
              for i, n in enumerate(nodes)}
    pos = {n: (float(x), float(y)) for n, (x, y) in nx.kamada_kawai_layout(plain, pos=circle).items()}
    return _clear_links(plain, pos)


def _clear_links(graph: nx.Graph, pos: dict[str, tuple[float, float]], *, gap: float = 0.12,
                 rounds: int = 60) -> dict[str, tuple[float, float]]:
    """Push nodes off links they are not on: a node lying on another link hides that link's
    arrows and labels. Moves each node at most ``gap`` (a fraction of the drawing's size) away
    from the nearest point of any closer link, a few rounds, deterministically."""
    pos = dict(pos)
    span = max(max(p[i] for p in pos.values()) - min(p[i] for p in pos.values()) for i in (0, 1)) or 1.0
    want = gap * span
    for _ in range(rounds):
        moved = False
        for n in sorted(pos, key=node_order):
            x, y = pos[n]
            for a, b in graph.edges:
                if n in (a, b):
                    continue
                (xa, ya), (xb, yb) = pos[a], pos[b]
                seg = (xb - xa) ** 2 + (yb - ya) ** 2 or 1e-12
                t = min(1.0, max(0.0, ((x - xa) * (xb - xa) + (y - ya) * (yb - ya)) / seg))
                px, py = xa + t * (xb - xa), ya + t * (yb - ya)
                dist = math.hypot(x - px, y - py)
                if dist < want:
                    if dist > 1e-9:
                        ux, uy = (x - px) / dist, (y - py) / dist
                    else:  # exactly on the link: step off sideways
                        ux, uy = (ya - yb) / seg**0.5, (xb - xa) / seg**0.5
                    x, y = x + ux * (want - dist) / 2, y + uy * (want - dist) / 2
                    moved = True
            pos[n] = (x, y)
        if not moved:
            break
    return pos


def _draw_panel(ax: Any, panel: dict[str, Any], pos: dict[str, tuple[float, float]], cmap: Any, norm: Any,
                unit: tuple[str, float]) -> None:
    """One scheduler: links by bytes (in ``unit``, the colour bar's: name and bytes), transfer
    arrows, then nodes on top."""
    from matplotlib.collections import LineCollection

    graph, link_bytes = panel["graph"], panel["link_bytes"]
    # busiest links drawn last, so an idle link crossing a busy one never cuts it
    edges = sorted(graph.edges, key=lambda e: (link_bytes[frozenset(e)], sorted(map(node_order, e))))
    carried = [link_bytes[frozenset(e)] / unit[1] for e in edges]
    widths = [_MIN_W + (_MAX_W - _MIN_W) * m / norm.vmax for m in carried]
    ax.add_collection(LineCollection([[pos[a], pos[b]] for a, b in edges], colors=cmap(norm(carried)),
                                     linewidths=widths, capstyle="round", zorder=1))
    ax.set_aspect("equal")  # before any offset in points: data and screen directions then agree
    ax.margins(0.08)
    ax.autoscale_view()
    _draw_transfers(ax, panel["transfers"], pos, {frozenset(e): w for e, w in zip(edges, widths)})
    _draw_nodes(ax, panel, pos)
    ax.axis("off")
    latency = panel["latency_s"]
    total = sum(link_bytes[frozenset(e)] for e in edges)
    total_unit, total_scale = size_unit(total)
    ax.set_title(f"{panel['label']}: {total / total_scale:.1f} {total_unit} on links, round "
                 + (f"{latency:.2f} s" if isinstance(latency, (int, float)) else "latency n/a"), fontsize=12)


def _draw_transfers(ax: Any, transfers: list[dict[str, Any]], pos: dict[str, tuple[float, float]],
                    widths: dict[frozenset[str], float]) -> None:
    """Arrows per hop and phase, shifted (in points, just clear of the link's own width) to the
    right of the direction of travel, so a link's broadcast and upload arrows sit on opposite
    sides of it and never vanish inside a thick link; a hop crossed by n transfers (n copies of
    the model) gets a thicker arrow and an "×n" label."""
    from matplotlib.patches import FancyArrowPatch
    from matplotlib.transforms import offset_copy

    hops = Counter((t["phase"], a, b) for t in transfers for a, b in zip(t["path"], t["path"][1:]))
    for (phase, a, b), n in sorted(hops.items()):
        (xa, ya), (xb, yb) = pos[a], pos[b]
        length = math.hypot(xb - xa, yb - ya) or 1.0
        nx_, ny_ = (yb - ya) / length, -(xb - xa) / length  # right-hand unit normal
        shift = widths[frozenset((a, b))] / 2 + 3.0
        style = PHASE_STYLE[phase]
        ax.add_patch(FancyArrowPatch(
            pos[a], pos[b], transform=offset_copy(ax.transData, ax.figure, nx_ * shift, ny_ * shift, "points"),
            arrowstyle="-|>", mutation_scale=10 + 2 * n, color=style["color"], linestyle=style["linestyle"],
            linewidth=1.2 + 0.5 * (n - 1), shrinkA=_NODE_PT + 1, shrinkB=_NODE_PT + 2, alpha=0.9, zorder=3))
        if n > 1:
            ax.text((xa + xb) / 2, (ya + yb) / 2, f"×{n}", color=style["color"], fontsize=8, fontweight="bold",
                    ha="center", va="center", zorder=8,
                    transform=offset_copy(ax.transData, ax.figure, nx_ * (shift + 9), ny_ * (shift + 9), "points"),
                    bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})


def _draw_nodes(ax: Any, panel: dict[str, Any], pos: dict[str, tuple[float, float]]) -> None:
    """Nodes labelled by name; G a gold star, local-model nodes green with their count beside
    them, aggregation nodes a thick purple ring."""
    counts, agg, g = panel["local_counts"], panel["aggregation_nodes"], panel["global_node"]
    size = (2 * _NODE_PT) ** 2
    for node in sorted(pos, key=node_order):
        x, y = pos[node]
        fill = "palegreen" if counts.get(node) else "white"
        edge, lw = ("purple", 3.0) if node in agg else ("black", 1.0)
        if node == g:
            ax.scatter([x], [y], s=size * 4.0, marker="*", c="gold", edgecolors="black", linewidths=0.8, zorder=5)
        ax.scatter([x], [y], s=size, c=fill, edgecolors=edge, linewidths=lw, zorder=6)
        if counts.get(node):  # name above, local-model count below, both inside the marker
            ax.annotate(node, (x, y), xytext=(0, 3.5), textcoords="offset points", ha="center", va="center",
                        fontsize=8, fontweight="bold", zorder=7)
            ax.annotate(f"L×{counts[node]}", (x, y), xytext=(0, -5), textcoords="offset points", ha="center",
                        va="center", fontsize=6.5, color="darkgreen", fontweight="bold", zorder=7)
        else:
            ax.text(x, y, node, ha="center", va="center", fontsize=8, fontweight="bold", zorder=7)


def _legend_handles() -> list[Any]:
    from matplotlib.lines import Line2D

    marker = {"marker": "o", "linestyle": "none", "markersize": 10}
    return [
        Line2D([], [], marker="*", color="gold", markeredgecolor="black", linestyle="none", markersize=16,
               label="G (global model)"),
        Line2D([], [], markerfacecolor="palegreen", markeredgecolor="black", color="w", **marker,
               label="local models (L×count)"),
        Line2D([], [], markerfacecolor="white", markeredgecolor="purple", markeredgewidth=3, color="w", **marker,
               label="aggregation node"),
        *(Line2D([], [], color=s["color"], linestyle=s["linestyle"], linewidth=1.8, label=s["label"])
          for s in PHASE_STYLE.values()),
    ]


def _pyplot() -> Any:
    """pyplot on the Agg backend: files only, never a window, so it works on headless hosts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def scheduler_colours(schedulers: list[str]) -> dict[str, str]:
    """A colour per scheduler: spff red and mst blue always, the others the fixed cycle in the order
    given, so one sweep's figures agree and the two built-in schedulers look the same in every one.

    >>> scheduler_colours(["mst", "ring", "spff", "tree"])
    {'mst': 'tab:blue', 'ring': 'tab:green', 'spff': 'tab:red', 'tree': 'tab:orange'}
    """
    others = itertools.cycle(COLOUR_CYCLE)
    return {s: SCHEDULER_COLOURS.get(s) or next(others) for s in schedulers}


MOST_K_TICKS = 12
"""Up to this many local-model counts, a sweep's figures tick each one; more get whole-number ticks
that matplotlib spaces."""


def _whole_ticks(ax: Any, ks: list[int]) -> None:
    """Ticks on ``ax``'s local-model axis at whole numbers only (never 2.25 or 2.5 local models):
    at each swept count, or where there are too many for that, at whole numbers matplotlib spaces."""
    from matplotlib.ticker import MaxNLocator

    if len(ks) <= MOST_K_TICKS:
        ax.set_xticks(ks)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_sweep(rows: list[dict[str, Any]], out_dir: Path, suffix: str = "", subject: str = "") -> tuple[Path, Path]:
    """The poster's Figure 3, measured: task latency and consumed bandwidth against the number of
    local models, one line per scheduler in the rows (in the order they first appear) with the
    spread over seeds as error bars and the Plans' prediction dashed beside it (a marker at each
    point, so that a sweep of one point shows it too). Returns the two PNGs
    (latency, bandwidth), their names ending in ``suffix``; both titles name ``subject`` (what
    these rows ran: ``TCP dctcp``, with the model where a sweep ran several)."""
    from statistics import mean, pstdev

    plt = _pyplot()

    def series(scheduler: str, value: Any) -> tuple[list[int], list[float], list[float]]:
        ks = sorted({r["local_models"] for r in rows if r["scheduler"] == scheduler})
        means, spreads = [], []
        for k in ks:
            per_seed = {}
            for r in rows:
                if r["scheduler"] == scheduler and r["local_models"] == k:
                    per_seed.setdefault(r["seed"], []).append(value(r))
            seed_means = [mean(v) for v in per_seed.values()]
            means.append(mean(seed_means))
            spreads.append(pstdev(seed_means) if len(seed_means) > 1 else 0.0)
        return ks, means, spreads

    colours = scheduler_colours(list(dict.fromkeys(r["scheduler"] for r in rows)))
    paths = (out_dir / f"latency_vs_local_models{suffix}.png", out_dir / f"bandwidth_vs_local_models{suffix}.png")
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for s, c in colours.items():
        ks, m, e = series(s, lambda r: r["round_s"])
        label = scheduler_label(s)
        ax.errorbar(ks, m, yerr=e, color=c, marker="o", capsize=3, label=f"{label} measured")
        ks, m, _ = series(s, lambda r: r["run_predicted_comm_s"] + r["train_s"])
        ax.plot(ks, m, color=c, linestyle="--", marker="x",
                label=f"{label} predicted (fluid model + measured training)")
    scales = ", ".join(f"{n:g}" for n in sorted({float(r["time_scale"]) for r in rows}))
    under = "; ".join([subject] * bool(subject) + [f"time scale {scales}: the network's seconds"] * (scales != "1"))
    ax.set(xlabel="local models per task", ylabel="task round latency (s)",
           title="Latency (training + communication) vs local models" + (f"\n({under})" if under else ""))
    all_ks = sorted({int(r["local_models"]) for r in rows})
    _whole_ticks(ax, all_ks)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)  # below: it hides no point
    fig.tight_layout()
    _save(fig, paths[0], dpi=130)
    plt.close(fig)
    byte_keys = ("run_link_bytes_measured", "run_link_bytes_predicted")
    unit, scale = size_unit(max([r[key] for r in rows for key in byte_keys] + [1]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.2))
    for s, c in colours.items():
        ks, m, e = series(s, lambda r: r["run_link_bytes_measured"] / scale)
        label = scheduler_label(s)
        left.errorbar(ks, m, yerr=e, color=c, marker="o", capsize=3, label=f"{label} measured")
        ks, m, _ = series(s, lambda r: r["run_link_bytes_predicted"] / scale)
        left.plot(ks, m, color=c, linestyle="--", marker="x", label=f"{label} predicted")
        ks, m, e = series(s, lambda r: r["run_reserved_capacity_mbps"] / 1e3)
        right.errorbar(ks, m, yerr=e, color=c, marker="s", capsize=3, label=label)
    left.set(xlabel="local models per task", ylabel=f"{unit} on all links per round",
             title="Consumed bandwidth: bytes on links")
    right.set(xlabel="local models per task", ylabel="Gbit/s reserved",
              title="Consumed bandwidth: wavelength capacity reserved")
    for ax in (left, right):
        _whole_ticks(ax, all_ks)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if subject:
        fig.suptitle(subject)
    fig.tight_layout()
    _save(fig, paths[1], dpi=130)
    plt.close(fig)
    return paths


def plot_regime_map(points: list[dict[str, Any]], out: Path, subject: str = "") -> Path:
    """Where each schedule wins (:func:`fedmst.run.experiments.regime_map`): for every (local
    models, model size) cell, the scheduler with the least communication time per round (left) and
    the fewest link bytes (right), measured, coloured by scheduler, with the Plans' own pick written
    under it (ties within 1% share a cell); the title names ``subject`` (``TCP dctcp``)."""
    plt = _pyplot()
    ks = sorted({p["local_models"] for p in points})
    sizes = sorted({(p["model_bytes"], p["model"]) for p in points})
    names = list(dict.fromkeys(s for p in points for key in ("latency_measured", "bytes_measured",
                                                             "latency_predicted", "bytes_predicted")
                               for s in p[key]))
    colours = scheduler_colours(names)
    fig, axes = plt.subplots(1, 2, figsize=(11, 1.4 + 1.1 * len(sizes)), sharey=True)
    for ax, what, title in ((axes[0], "latency", "least communication time per round"),
                            (axes[1], "bytes", "fewest link bytes per round")):
        for p in points:
            x, y = ks.index(p["local_models"]), sizes.index((p["model_bytes"], p["model"]))
            won, said = p[f"{what}_measured"], p[f"{what}_predicted"]
            ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, color=colours[won[0]], alpha=0.55))
            agree = "" if set(said) & set(won) else " (!)"
            ax.text(x, y + 0.12, "=".join(scheduler_label(s) for s in won), ha="center", va="center", fontsize=7.5,
                    weight="bold")
            ax.text(x, y - 0.22, "pred " + "=".join(scheduler_label(s) for s in said) + agree, ha="center",
                    va="center", fontsize=6)
        ax.set(xlim=(-0.5, len(ks) - 0.5), ylim=(-0.5, len(sizes) - 0.5), title=f"{title}, measured",
               xlabel="local models per task")
        ax.set_xticks(range(len(ks)), [str(k) for k in ks])
    axes[0].set_yticks(range(len(sizes)), [f"{m}\n{size_label(b)}" for b, m in sizes])
    axes[0].set_ylabel("model")
    fig.suptitle(f"Where each schedule wins{f', {subject}' if subject else ''} (under each cell: the Plans' "
                 "prediction; (!) where it differs)", fontsize=9)
    fig.tight_layout()
    _save(fig, out, dpi=130)
    plt.close(fig)
    return out


def plot_accuracy(run_dir: Path, out: Path | None = None) -> Path:
    """The global model's test accuracy after each round, against the round, the time of the
    rounds and the link bytes they moved, for the run or for every scheduler of a compare folder,
    with the target accuracy of ``summary.json`` (time and bytes to accuracy) dashed across."""
    found = _find_runs(run_dir)
    labels = run_labels(found)
    runs = []
    for name, run in found:
        rows = read_csv(run / "rounds.csv") if (run / "rounds.csv").is_file() else []
        if not rows:
            raise FedmstError(f"{run}: no rounds.csv with a finished round to draw")
        summary = Summary.read(run / "summary.json") if (run / "summary.json").is_file() else None
        runs.append((name, rows, summary))
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    colours = scheduler_colours([name for name, _, _ in runs])
    fig, (by_round, by_time, by_bytes) = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
    for name, rows, summary in runs:
        rounds = [int(r["round"]) for r in rows]
        acc = [float(r["accuracy"]) for r in rows]
        elapsed = list(itertools.accumulate(float(r["round_s"]) for r in rows))
        # on independent clocks the rounds overlap: their bytes are measured over the whole run only
        moved = (list(itertools.accumulate(float(r["bytes_measured"]) / 1e6 for r in rows))
                 if all(r["bytes_measured"] for r in rows) else None)
        reached = (f", {summary.target_accuracy:g} after {summary.time_to_accuracy_s:.1f} s"
                   if summary is not None and summary.time_to_accuracy_s is not None else "")
        spent = (f", {summary.target_accuracy:g} after {summary.bytes_to_accuracy / 1e6:.0f} MB"
                 if summary is not None and summary.bytes_to_accuracy is not None else "")
        style = {"color": colours[name], "marker": "o"}
        by_round.plot(rounds, acc, label=labels[name], **style)
        by_time.plot(elapsed, acc, label=f"{labels[name]}{reached}", **style)
        if moved is not None:
            by_bytes.plot(moved, acc, label=f"{labels[name]}{spent}", **style)
    if not by_bytes.lines:
        by_bytes.text(0.5, 0.5, "not measured round by round: the tasks' rounds overlap\n"
                      "(links.csv holds the whole run's bytes)", transform=by_bytes.transAxes, ha="center",
                      va="center", fontsize=9)
    targets = {s.target_accuracy for _, _, s in runs if s is not None}
    for ax in (by_round, by_time, by_bytes):
        for target in targets:
            ax.axhline(target, color="grey", linestyle="--", linewidth=1)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    same = len({tuple(float(r["accuracy"]) for r in rows) for _, rows, _ in runs}) == 1 < len(runs)
    by_round.set(xlabel="round", ylabel="test accuracy of the global model",
                 title="Accuracy per round" + (" (the same under every scheduler)" if same else ""))
    by_round.xaxis.set_major_locator(MaxNLocator(integer=True))
    by_time.set(xlabel="time of the rounds (s)", title="Accuracy against time (time to accuracy)")
    by_bytes.set(xlabel="link bytes of the rounds (MB)", title="Accuracy against link bytes (bytes to accuracy)")
    by_round.set_ylim(0, 1)
    fig.tight_layout()
    target_path = out or Path(run_dir) / "accuracy.png"
    try:
        _save(fig, target_path, dpi=130)
    finally:
        plt.close(fig)
    return target_path


def plot_link_utilisation(run_dir: Path, link: str, out: Path | None = None) -> Path:
    """One link's utilisation over the run, both directions, from the counters sampled every
    100 ms (``samples.csv``), with the broadcast/train/upload phases shaded."""
    _refuse_compare(run_dir, "--link")
    u, sep, v = link.partition("-")
    caps = {(r.src, r.dst): r.capacity_mbps for r in read_links(run_dir / "links.csv")} \
        if (run_dir / "links.csv").is_file() else {}
    series = rate_series(run_dir / "samples.csv")
    if not sep or (u, v) not in caps:
        raise FedmstError(f"{run_dir}: no link {link!r} in links.csv (give it as A-B, e.g. 0-1)")
    if series is None:
        raise FedmstError(f"{run_dir}: no samples.csv (runs from before counters were sampled)")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    spans: dict[tuple[str, str], list[float]] = {}
    for row in read_csv(run_dir / "samples.csv"):
        if (row["src"], row["dst"]) == (u, v):
            spans.setdefault((row["round"], row["phase"]), []).append(float(row["t_s"]))
    shades = {"broadcast": "tab:blue", "train": "tab:green", "upload": "tab:red"}
    for (_, phase), ts in spans.items():
        ax.axvspan(min(ts), max(ts), color=shades.get(phase, "grey"), alpha=0.08, lw=0)
    for hop, style in (((u, v), "-"), ((v, u), "--")):
        points = series.get(hop, [])
        ax.plot([t for t, _ in points], [100 * r * 8 / (caps[hop] * 1e6) for _, r in points], style,
                label=f"{hop[0]}->{hop[1]}")
    ax.set(xlabel="seconds since round 1 started", ylabel="utilisation (%)",
           title=f"Link {u}-{v} ({caps[(u, v)]:g} Mbit/s); shaded: broadcast blue, train green, upload red")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    target = out or run_dir / f"link-{u}-{v}.png"
    try:
        _save(fig, target, dpi=130)
    finally:
        plt.close(fig)
    return target


def _refuse_compare(run_dir: Path, option: str) -> None:
    """``option`` draws one run: a compare folder is refused in one line that names its runs, and
    so is a run that measured nothing, saying how it ended."""
    check_measured(run_dir)
    runs = compare_runs(run_dir)
    if runs:
        raise FedmstError(f"{run_dir} is a compare folder: {option} draws one run, give one of "
                          f"{', '.join(str(run) for _, run in runs)}")


TIMELINE_COLOURS = {"broadcast": "tab:blue", "train": "tab:green", "upload": "tab:red"}
TIMELINE_LINKS = 4
"""Link directions drawn under a timeline: the busiest ones."""
_BESIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": "small", "frameon": False}
"""Where a timeline's legends stand: right of their axes, since over a timeline they would hide a
phase or a peak."""


def plot_timeline(run_dir: Path, out: Path | None = None) -> Path:
    """Each task's phases against time (``timeline.csv``): a bar per phase coloured by phase, the
    measured timeline with the predicted one (an independent clock's) as a thin bar beneath it, and
    the most utilised link directions' utilisation below (``samples.csv``), on the same time axis.
    The legends stand right of the axes, where they hide no bar and no line."""
    _refuse_compare(run_dir, "--timeline")
    path = run_dir / "timeline.csv"
    if not path.is_file():
        raise FedmstError(f"{run_dir}: no timeline.csv (a run folder from before timelines were written?)")
    rows = read_csv(path)
    tasks = sorted({r["task"] for r in rows}, key=lambda t: (len(t), t))
    caps = {(r.src, r.dst): r.capacity_mbps for r in read_links(run_dir / "links.csv")} \
        if (run_dir / "links.csv").is_file() else {}
    series = rate_series(run_dir / "samples.csv") or {}
    busiest = sorted((hop for hop in series if hop in caps and series[hop]),  # by utilisation: bottlenecks first
                     key=lambda hop: -sum(r for _, r in series[hop]) / caps[hop])[:TIMELINE_LINKS]
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 1.2 + 0.7 * len(tasks) + 2.6), sharex=True,
                                      gridspec_kw={"height_ratios": [max(1.0, 0.6 * len(tasks)), 1.6]})
    for r in rows:
        i, measured = tasks.index(r["task"]), r["kind"] == "measured"
        start, end = float(r["start_s"]), float(r["end_s"])
        top.barh(i + (0.0 if measured else 0.32), end - start, left=start, height=0.5 if measured else 0.12,
                 color=TIMELINE_COLOURS[r["phase"]], alpha=0.9 if measured else 0.55,
                 edgecolor="white" if measured else "none", linewidth=0.4)
    top.set_yticks(range(len(tasks)), tasks)
    top.invert_yaxis()
    predicted = any(r["kind"] != "measured" for r in rows)  # only an independent clock predicts a timeline
    top.set_title("phases of each task" + (" (thin bars beneath: predicted)" if predicted else ""))
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in TIMELINE_COLOURS.values()]
    top.legend(handles, list(TIMELINE_COLOURS), **_BESIDE)
    for hop in busiest:
        points = series[hop]
        bottom.plot([t for t, _ in points], [100 * b * 8 / (caps[hop] * 1e6) for _, b in points],
                    label=f"{hop[0]}->{hop[1]} ({caps[hop]:g} Mbit/s)", lw=1)
    bottom.set(xlabel="seconds since the first round started", ylabel="link utilisation (%)")
    bottom.set_ylim(bottom=0)
    bottom.grid(alpha=0.3)
    if busiest:
        bottom.legend(**_BESIDE)
    fig.tight_layout()
    target = out or run_dir / "timeline.png"
    try:
        _save(fig, target, dpi=130, bbox_inches="tight")
    finally:
        plt.close(fig)
    return target
