"""``pagesim validate-vllm``: read → replay → compare → report, for any dataset."""

from __future__ import annotations

from pathlib import Path

from pagesim.experiments.validation import report, vcsv
from pagesim.experiments.validation.compare import closed_loop_rows
from pagesim.experiments.validation.datasets import recognise
from pagesim.experiments.validation.replay import replay

PAGE_NAME = "validation.md"


def run_validation(data_dir: str | Path, out_dir: str | Path, *, progress: bool = False):
    """The study, its ``validation.csv`` table, its goals and the replays."""
    folder, out_dir = Path(data_dir), Path(out_dir)
    dataset = recognise(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    study = dataset.prepare(folder, out_dir)
    pairs = [(v, c) for v in study.runs for c in study.cost_models]
    if progress:
        from tqdm import tqdm

        pairs = tqdm(pairs, desc=f"replaying {study.dataset}", unit="run")
    replays, rows = {}, []
    for vrun, cost in pairs:
        rep = replays[(vrun.name, cost.name)] = replay(vrun, cost)
        rows += closed_loop_rows(study, vrun, cost.name, rep)
    rows += dataset.open_loop_rows(study)
    table = vcsv.frame(rows)
    goals = dataset.goals(study, table)
    study.sections = dataset.sections(study, table, replays)
    return study, table, goals, replays


def _descriptions(study, replays) -> dict[str, str]:
    """Each cost model's description, profiles written into the output folder named by
    their folder (no machine path in a page that may be committed)."""
    first = study.runs[0].name
    out = {}
    for c in study.cost_models:
        text = replays[(first, c.name)].description
        if c.profile and Path(c.profile).suffix in (".yaml", ".yml"):
            text = text.replace(c.profile, Path(c.profile).parent.name)
        out[c.name] = text
    return out


def write_validation(
    data_dir: str | Path,
    out_dir: str | Path,
    docs_page: str | Path | None = None,
    *,
    progress: bool = False,
) -> dict[str, Path]:
    """Run the validation of ``data_dir``'s dataset and write ``validation.csv``, the
    chart and the page into ``out_dir`` (and the page and chart beside ``docs_page``)."""
    out_dir = Path(out_dir)
    study, table, goals, replays = run_validation(data_dir, out_dir, progress=progress)
    chart_name = report.CHART_NAME.format(dataset=study.dataset)
    text = report.page(study, table, goals, _descriptions(study, replays), chart_name)
    written = {"csv": vcsv.write(table, out_dir)}
    written["chart"] = report.draw_chart(study, table, out_dir / chart_name)
    written["page"] = out_dir / PAGE_NAME
    written["page"].write_text(text)
    for c in study.cost_models:
        if c.profile and Path(c.profile).is_file():
            written[f"profile {Path(c.profile).parent.name}"] = Path(c.profile)
    if docs_page is not None:
        docs_page = Path(docs_page)
        docs_page.parent.mkdir(parents=True, exist_ok=True)
        docs_page.write_text(text)
        written["docs_page"] = docs_page
        written["docs_chart"] = report.draw_chart(study, table, docs_page.parent / chart_name)
    return written
