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


def test_demo_runs_end_to_end_on_a_tiny_model(tmp_path, llama_dir):
    out = tmp_path / "demo"
    config = DemoConfig(model=str(llama_dir), tasks=["organism/reverse", "organism/uppercase"], out=str(out),
                        steps=4, batch_size=4, influence_k=6, device="cpu", png=False)
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
    assert report.count('class="caption"') >= 7 and "nats/token" in report and "% (" in report
    assert "<th>bleu</th>" not in report and "one-word answers" in report  # no BLEU for one-word answers
    assert "<th>strict accuracy</th>" in report and "echo baseline" in report and "Wilson" in report


def test_demo_command_reports_bad_input_clearly(tmp_path, capsys, llama_dir):
    code = main(["demo", "--model", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert code == 2
    assert "no config.json" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    code = main(["demo", "--model", str(llama_dir), "--tasks", "no-such-task", "--out", str(tmp_path / "o")])
    assert code == 2
    assert "unknown task 'no-such-task'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
