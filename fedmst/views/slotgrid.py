"""``fedmst plot --slots``: the timeslots of a run on a fabric, as they were used.

One panel per fibre direction that carried time-sliced lightpaths (the busiest :data:`PANELS`),
each a grid of time (samples.csv's 0.1 s) against the OTS wavelengths' slots held there: a cell
is coloured by the task whose transfer sent in that slot then, darker for more bytes. It is drawn
from ``slot_occupancy.csv`` and ``timeslot_table.json``, which the captures wrote
(:mod:`fedmst.run.slotmeter`), so it shows what crossed, not what was planned.
"""

from __future__ import annotations

import json
from pathlib import Path

from fedmst.errors import FedmstError
from fedmst.run.results import read_csv
from fedmst.run.slotmeter import BIN_S
from fedmst.views.plots import _BESIDE, _pyplot, _refuse_compare, _save

PANELS = 6
"""Fibre directions drawn: the ones that carried the most time-sliced bytes."""
LEGEND_TASKS = 12
"""Tasks named in the legend; more are said as a count."""


def plot_slots(run_dir: Path, out: Path | None = None) -> Path:
    """The figure of the module docstring, into ``out`` (default ``RUN_DIR/slots.png``)."""
    _refuse_compare(run_dir, "--slots")
    path = run_dir / "slot_occupancy.csv"
    if not path.is_file():
        raise FedmstError(f"{run_dir}: no slot_occupancy.csv: the run held no time-sliced lightpath (--optical ots, "
                          "size or joint on a fabric with --ots-wavelengths), or it ran before slots were drawn")
    rows = read_csv(path)
    if not rows:
        raise FedmstError(f"{run_dir}: slot_occupancy.csv is empty: nothing crossed a time-sliced lightpath")
    frame0 = float(json.loads((run_dir / "timeslot_table.json").read_text())["frame0_s"])
    carried: dict[str, int] = {}
    for r in rows:
        carried[r["link"]] = carried.get(r["link"], 0) + int(r["bytes"])
    links = sorted(carried, key=lambda link: -carried[link])[:PANELS]
    tasks = sorted({r["task"] for r in rows}, key=lambda t: (len(t), t))
    plt = _pyplot()
    colours = plt.get_cmap("tab20" if len(tasks) > 10 else "tab10")
    colour = {task: colours(i % colours.N) for i, task in enumerate(tasks)}
    fig, axes = plt.subplots(len(links), 1, figsize=(10, 1.2 + 1.4 * len(links)), sharex=True, squeeze=False)
    times = [frame0 + float(r["t_s"]) for r in rows]
    for ax, link in zip(axes[:, 0], links):
        here = [r for r in rows if r["link"] == link]
        slots = sorted({(int(r["wavelength"]), int(r["slot"])) for r in here})
        peak = max(int(r["bytes"]) for r in here)
        for r in here:
            y = slots.index((int(r["wavelength"]), int(r["slot"])))
            ax.add_patch(plt.Rectangle((frame0 + float(r["t_s"]), y - 0.45), BIN_S, 0.9, lw=0,
                                       color=colour[r["task"]], alpha=0.25 + 0.75 * int(r["bytes"]) / peak))
        ax.set_yticks(range(len(slots)), [f"λ{w} slot {k}" for w, k in slots], fontsize="x-small")
        ax.set_ylim(-0.6, len(slots) - 0.4)
        ax.set_title(f"{link}: {carried[link] / 1e6:.1f} MB in its slots", loc="left", fontsize="small")
    axes[-1, 0].set_xlim(min(times), max(times) + BIN_S)
    axes[-1, 0].set_xlabel("seconds since the first round started")
    shown = tasks[:LEGEND_TASKS]
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[t]) for t in shown]
    axes[0, 0].legend(handles, shown, title=f"{len(shown)} of {len(tasks)} tasks" if len(tasks) > len(shown) else None,
                      **_BESIDE)
    fig.suptitle(f"Timeslots used on the {len(links)} busiest of {len(carried)} fibre directions "
                 f"(a cell: one slot of every frame over {BIN_S:g} s; darker: more bytes)", fontsize="small")
    fig.tight_layout()
    target = out or run_dir / "slots.png"
    try:
        _save(fig, target, dpi=130, bbox_inches="tight")
    finally:
        plt.close(fig)
    return target
