"""``pde report [RUN_DIR ...]``: one self-contained HTML page per run (``<run>/report.html``).

A run is a folder under ``DataLayout.runs`` (learner/run_log.py). The page holds every curve of the
run's TensorBoard event files as an inline SVG plot (read with TensorBoard's own reader), the
per-prompt table built from ``episodes.jsonl`` and a link to each episode's camera videos. Nothing
is fetched: it opens from the disk, offline, and its only outside references are the videos."""

from __future__ import annotations

import argparse
import html
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import msgspec

from pde_contract.run_metrics import RUN_EPISODES_FILE, RunEpisode
from pde_contract.settings import DEFAULT_DATA_DIR, DataLayout

REPORT_FILE = "report.html"
PLOT_W_PX, PLOT_H_PX, PAD_PX = 360, 180, 34


@dataclass(frozen=True)
class Curve:
    name: str
    steps: list[int]
    values: list[float]


def read_curves(run_dir: Path) -> list[Curve]:
    """Every scalar curve of the run's event files, by name, read with TensorBoard's reader."""
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    curves = []
    for tag in sorted(acc.Tags()["scalars"]):
        events = acc.Scalars(tag)
        curves.append(Curve(tag, [e.step for e in events], [e.value for e in events]))
    return curves


def read_episodes(run_dir: Path) -> list[RunEpisode]:
    path = run_dir / RUN_EPISODES_FILE
    if not path.is_file():
        return []
    decoder = msgspec.json.Decoder(RunEpisode)
    out = []
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(decoder.decode(line))
        except msgspec.ValidationError as e:
            # A line cut by a kill mid-write is the only expected damage: say which, keep the rest.
            print(f"pde report: {path}:{n}: skipped ({e})", file=sys.stderr)
    return out


def svg_plot(curve: Curve) -> str:
    """A line plot of ``curve`` with its range on the axes, as inline SVG."""
    xs, ys = curve.steps, curve.values
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    w, h = PLOT_W_PX - 2 * PAD_PX, PLOT_H_PX - 2 * PAD_PX

    def xy(x: float, y: float) -> str:
        fx = 0.5 if x1 == x0 else (x - x0) / (x1 - x0)
        return f"{PAD_PX + fx * w:.1f},{PAD_PX + (1 - (y - y0) / (y1 - y0)) * h:.1f}"

    points = " ".join(xy(x, y) for x, y in zip(xs, ys, strict=True))
    dots = "".join(f'<circle cx="{p.split(",")[0]}" cy="{p.split(",")[1]}" r="2"/>' for p in points.split())
    return (
        f'<svg width="{PLOT_W_PX}" height="{PLOT_H_PX}" role="img" aria-label="{html.escape(curve.name)}">'
        f'<rect x="{PAD_PX}" y="{PAD_PX}" width="{w}" height="{h}" fill="none" stroke="#ccc"/>'
        f'<polyline points="{points}" fill="none" stroke="#1f6feb"/><g fill="#1f6feb">{dots}</g>'
        f'<text x="{PAD_PX}" y="{PAD_PX - 8}">{html.escape(curve.name)}</text>'
        f'<text x="2" y="{PAD_PX + 4}">{y1:.3g}</text><text x="2" y="{PAD_PX + h}">{y0:.3g}</text>'
        f'<text x="{PAD_PX}" y="{PLOT_H_PX - 8}">{x0}</text>'
        f'<text x="{PAD_PX + w}" y="{PLOT_H_PX - 8}" text-anchor="end">{x1}</text></svg>'
    )


def prompt_rows(episodes: list[RunEpisode]) -> list[tuple[str, str, str, int, int]]:
    """(task, prompt, source, episodes, successes) per prompt the run rolled out."""
    by: dict[tuple[str, int], list[RunEpisode]] = defaultdict(list)
    for e in episodes:
        by[(e.task, e.prompt_id)].append(e)
    rows = []
    for (task, _), eps in sorted(by.items()):
        rows.append((task, eps[0].prompt, eps[0].prompt_source.value, len(eps), sum(e.success for e in eps)))
    return rows


def render(run_dir: Path, curves: list[Curve], episodes: list[RunEpisode]) -> str:
    esc = html.escape
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{esc(run_dir.name)}</title>",
        "<style>body{font:14px sans-serif;margin:2em}svg{margin:4px;font:11px sans-serif}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
        "h2{margin-top:1.5em}</style></head><body>",
        f"<h1>Run {esc(run_dir.name)}</h1>",
        f"<p>{len(curves)} curves, {len(episodes)} labelled episodes. Curves: x is labelled episodes "
        "(loop), policy version (ppo/) or optimiser step (sft/).</p>",
        "<h2>Per prompt</h2>",
    ]
    if episodes:
        out.append(
            "<table><tr><th>task</th><th>prompt</th><th>source</th><th>episodes</th>"
            "<th>successes</th><th>success rate</th></tr>"
        )
        for task, prompt, source, n, k in prompt_rows(episodes):
            out.append(
                f"<tr><td>{esc(task)}</td><td>{esc(prompt)}</td><td>{esc(source)}</td>"
                f"<td>{n}</td><td>{k}</td><td>{k / n:.2f}</td></tr>"
            )
        out.append("</table>")
    else:
        out.append("<p>No labelled episodes in this run.</p>")
    groups: dict[str, list[Curve]] = defaultdict(list)
    for c in curves:
        groups[c.name.split("/")[0]].append(c)
    for group, members in sorted(groups.items()):
        out.append(f"<h2>{esc(group)}</h2><div>")
        out += [svg_plot(c) for c in members if c.steps]
        out.append("</div>")
    if episodes:
        out.append(
            "<h2>Episodes</h2><table><tr><th>id</th><th>task</th><th>prompt</th><th>stage</th>"
            "<th>version</th><th>success</th><th>time (s)</th><th>videos</th></tr>"
        )
        for e in episodes:
            links = " ".join(
                f'<a href="{esc(Path(os.path.relpath(p, run_dir)).as_posix())}">{esc(cam)}</a>'
                for cam, p in sorted(e.videos.items())
            )
            out.append(
                f"<tr><td>{e.id}</td><td>{esc(e.task)}</td><td>{esc(e.prompt)}</td><td>{esc(e.stage)}</td>"
                f"<td>{e.policy_version}</td><td>{'yes' if e.success else 'no'}</td>"
                f"<td>{e.episode_s:.1f}</td><td>{links}</td></tr>"
            )
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out)


def write_report(run_dir: Path) -> Path:
    """``run_dir``'s page, written beside its event files."""
    if not run_dir.is_dir():
        raise FileNotFoundError(f"no run folder at {run_dir}")
    if not any(run_dir.glob("events.out.tfevents.*")) and not (run_dir / RUN_EPISODES_FILE).is_file():
        raise FileNotFoundError(
            f"{run_dir} holds no TensorBoard event file and no {RUN_EPISODES_FILE}: is it a run folder "
            "(<data>/logs/runs/<kind>-<time>)?"
        )
    out = run_dir / REPORT_FILE
    out.write_text(render(run_dir, read_curves(run_dir), read_episodes(run_dir)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="pde report", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path, help="run folders (default: every run under --data-dir)")
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("PDE_DATA_DIR", DEFAULT_DATA_DIR)),
        help="data folder whose logs/runs/ holds the runs (default: $PDE_DATA_DIR or data)",
    )
    args = ap.parse_args(argv)
    runs = args.runs or sorted(p for p in DataLayout(args.data_dir).runs.glob("*") if p.is_dir())
    if not runs:
        print(f"pde report: no runs under {DataLayout(args.data_dir).runs}", file=sys.stderr)
        return 2
    try:
        import tensorboard  # noqa: F401
    except ModuleNotFoundError:
        print(
            "pde report: reading event files needs tensorboard (`pip install -e .[learner]`)", file=sys.stderr
        )
        return 2
    failed = 0
    for run in runs:
        try:
            print(write_report(run))
        except FileNotFoundError as e:
            print(f"pde report: {e}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0
