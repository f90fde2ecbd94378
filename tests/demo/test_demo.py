import json

import pandas as pd
import plotly.graph_objects as go

from headsup_lens.cli import main
from headsup_lens.demo import DemoConfig, Report, run_demo


def test_report_embeds_plotly_once_and_escapes_text(tmp_path):
    report = Report("a <title>")
    report.note("x < y")
    report.table(pd.DataFrame({"task": ["t"], "accuracy": [0.91234]}))
    report.figure(go.Figure(go.Scatter(y=[1, 2])))
    report.figure(go.Figure(go.Bar(y=[3])))
    html = report.write(tmp_path / "r.html").read_text()
    assert "a &lt;title&gt;" in html and "x &lt; y" in html and "0.912" in html
    assert html.count("plotly.js v") == 1  # the library is inlined once, not per figure
    assert html.count('class="plotly-graph-div"') == 2


def test_demo_runs_end_to_end_on_a_tiny_model(tmp_path, llama_dir, capsys):
    out = tmp_path / "demo"
    config = DemoConfig(
        model=str(llama_dir),
        tasks=["organism/reverse", "organism/uppercase"],
        out=str(out),
        steps=4,
        batch_size=4,
        influence_k=6,
        device="cpu",
        png=False,
    )
    result = run_demo(config)
    assert (out / "report.html").stat().st_size > 100_000
    assert list(result.summary.task) == ["organism/reverse", "organism/uppercase"]
    assert set(result.sweeps) == {"weight order", "influence order", "random order"}
    assert len(result.sweeps["weight order"].steps) == 2 * 8 + 1
    weight, influence = result.sweeps["weight order"].order, result.sweeps["influence order"].order
    assert sorted(influence[:6]) == sorted(weight[:6]) and influence[6:] == weight[6:]
    for name in ["summary", "evaluation", "sweeps", "sweep_weight_order", "generations"]:
        assert not pd.read_csv(out / "tables" / f"{name}.csv").empty
    summary = json.loads((out / "summary.json").read_text())
    assert summary["summary"][0]["task"] == "organism/reverse"
    assert (out / "training" / "masks").is_dir()
    # Not the organism: no planted pathway is claimed.
    assert "jaccard vs S_t" not in result.summary.columns
    # Figures share one plotly.js and load no external URL; the report explains itself.
    from ..plots.test_plots import external_sources

    assert (out / "figures" / "plotly.min.js").is_file()
    for page in [*(out / "figures").glob("*.html"), out / "report.html"]:
        assert not external_sources(page.read_text()), page.name
    report = (out / "report.html").read_text()
    assert report.count('class="caption"') >= 7 and "nats/token" in report and "%\u00a0(" in report
    assert "<th>bleu</th>" not in report and "one-word answers" in report  # no BLEU for one-word answers
    assert "<td>None</td>" not in report and "<td>nan</td>" not in report.lower()
    assert "<th>strict accuracy</th>" in report and "echo baseline" in report and "Wilson" in report
    assert_tables_fit_the_page(out / "report.html")
    # A rerun says what it takes from the earlier run (the demo resumes, as `headsup train` does).
    capsys.readouterr()
    run_demo(config)
    assert f"all done, read from the checkpoint of step 4 in {out / 'training'}" in capsys.readouterr().out


def assert_tables_fit_the_page(path):
    """Every table sits in a box that scrolls (never the page), and the cells may wrap: between a
    value and its interval (`87% (87/100) [80‑92%]` never breaks inside `[80‑92%]`) and after a
    task's "/". Where Chromium is installed, the page is laid out at 1280 pixels: no table is wider
    than its box, so none scrolls at all."""
    import re
    import shutil
    import subprocess

    page = path.read_text()
    tables = page.count("<table")
    assert tables >= 3 and page.count("<div class='table-wrap'><table") == tables  # none kept from wrapping
    assert ".table-wrap { overflow-x: auto; max-width: 100%; }" in page
    intervals = re.findall(r"\[\d+\S\d+%\]", page)
    assert intervals and all("\u2011" in interval for interval in intervals)  # no breakable hyphen inside
    assert "organism/\u200breverse" in page  # a task's name may break after its "/"
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return
    probe = path.with_name("probe.html")
    measure = (
        "<script>document.title = 'widths ' + document.documentElement.scrollWidth + ' '"
        " + document.documentElement.clientWidth + ' ' + Array.from(document.querySelectorAll('.table-wrap'))"
        ".map(d => d.scrollWidth + '/' + d.clientWidth).join(' ');</script></body>"
    )
    probe.write_text(page.replace("</body>", measure))
    done = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,800",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    title = re.search(r"<title>widths ([^<]*)</title>", done.stdout)
    assert title is not None, done.stderr[-2000:]
    page_width, view_width, *boxes = title.group(1).split()
    assert int(page_width) <= int(view_width) and len(boxes) == tables
    for box in boxes:
        inner, outer = map(int, box.split("/"))
        assert inner <= outer, f"a table {inner} px wide in a box of {outer} px"


def test_demo_command_reports_bad_input_clearly(tmp_path, capsys, llama_dir):
    code = main(["demo", "--model", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert code == 2
    assert "no config.json" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    code = main(["demo", "--model", str(llama_dir), "--tasks", "no-such-task", "--out", str(tmp_path / "o")])
    assert code == 2
    assert "unknown task 'no-such-task'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_data_and_stored_masks_are_checked_before_the_model_loads(tmp_path, capsys):
    missing_model = str(tmp_path / "no-model")  # loading it would fail with "no config.json"
    code = main(
        [
            "demo",
            "--model",
            missing_model,
            "--task",
            "antonym",
            "--data-dir",
            str(tmp_path / "no-data"),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "data directory" in err and "no config.json" not in err
    code = main(
        [
            "demo",
            "--model",
            missing_model,
            "--task",
            "organism/reverse",
            "--masks",
            str(tmp_path),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "no stored mask for" in err and "organism__reverse.safetensors" in err


def test_default_data_folder_honours_the_cache_variable(tmp_path, monkeypatch):
    from headsup_lens.data import default_data_dir
    from headsup_lens.models._gguf import model_cache_dir

    monkeypatch.setenv("HEADSUP_CACHE_DIR", str(tmp_path))
    assert default_data_dir() == tmp_path / "data" and model_cache_dir() == tmp_path / "models"


def test_demo_prints_never_not_none(tmp_path, capsys, monkeypatch):
    from types import SimpleNamespace

    import headsup_lens.demo as demo
    from headsup_lens.analysis import step_or_never

    assert step_or_never(None) == "never" and step_or_never(float("nan")) == "never" and step_or_never(7.0) == 7
    sweeps = {"random order": SimpleNamespace(switch_step=None, change_step=3)}
    fake = SimpleNamespace(
        summary=pd.DataFrame([{"task": "t", "masked": None}]), sweeps=sweeps, out=tmp_path, seconds=1.0
    )
    monkeypatch.setattr(demo, "run_demo", lambda config: fake)
    assert main(["demo", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "target becomes top-1 never; continuation first changes after 3" in out
    assert "None" not in out and "nan" not in out.lower()


def test_p_values_below_a_thousandth_read_as_such_and_settings_cells_do_not_wrap():
    import pandas as pd

    from headsup_lens.demo._report import Report, format_p_value

    assert [format_p_value(p) for p in (0.0, 1e-9, 0.0004, 0.0012, 0.5, 1.0)] == [
        "< 0.001",
        "< 0.001",
        "< 0.001",
        "0.001",
        "0.500",
        "1.000",
    ]
    assert format_p_value(float("nan")) == "—"
    report = Report("r")
    report.table(pd.DataFrame({"p": ["< 0.001"]}), nowrap=True)
    report.table(pd.DataFrame({"text": ["a long sentence"]}))
    page = report.to_html()
    assert "<div class='table-wrap nowrap'>" in page and "<div class='table-wrap'>" in page
    assert ".nowrap td { white-space: nowrap; }" in page and "0.000" not in page
