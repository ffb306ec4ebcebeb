"""The app and the CLI as an operator uses them: one test or more per problem an operator
reported (docs/app.md). AppTest drives the pages; the browser checks (cut metric values, widgets kept
across a solver switch and a page round trip, console errors) are in test_app_browser.py.
Tests that replay traces or run several solvers through the app are marked slow."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from solvers import Problem, score, solve  # noqa: E402
from solvers.cli import main as cli  # noqa: E402
from solvers.io import load_dataset  # noqa: E402

# The AppTest helpers and the torch-threads fixture of the page tests (one copy).
from tests.test_app_pages import _app, _charts, _clean, _keep_torch_threads, _layer_slider  # noqa: E402,F401


def _layer(at: AppTest, page: str = "explore") -> int:
    return int(_layer_slider(at, page).value)


@pytest.fixture(scope="module")
def skewed() -> torch.Tensor:
    return load_dataset("deepseek-v3-skewed").loads                           # [24, 58, 256]


def _problem(trace: torch.Tensor, start: int = 0, stop: int | None = None) -> Problem:
    return Problem(trace[start:stop].sum(0).double(), 288, 8, 4, 32)


# 1. metric cards ------------------------------------------------------------------------

def test_1_cards_are_numbers_with_short_labels_and_the_run_is_one_line():
    at = _app().run()
    _clean(at)
    labels = [m.label for m in at.metric]
    assert "Termination" not in labels and "Solution" not in labels          # text values moved to the run line
    assert all(len(m.label) <= 14 and len(m.value) <= 8 for m in at.metric), [(m.label, m.value) for m in at.metric]
    line = at.markdown[0].value
    assert "policy **hierarchical**" in line and "termination **completed**" in line and "solution **" in line


# 2. settings kept -----------------------------------------------------------------------

def test_2_policy_survives_a_solver_switch_and_a_page_round_trip(skewed):
    at = _app().run()
    at.selectbox(key="loads:dataset").set_value("deepseek-v3-mild").run()
    at.selectbox(key="explore:opt:policy").set_value("global").run()
    _clean(at)
    assert "policy **global**" in at.markdown[0].value
    at.selectbox(key="explore:solver").set_value("kk_swap").run()
    _clean(at)
    assert at.selectbox(key="explore:opt:policy").value == "global"        # kept across the solver switch
    assert "**kk_swap** · policy **global**" in at.markdown[0].value
    at.switch_page("views/compare.py").run()
    _clean(at)
    assert at.selectbox(key="loads:dataset").value == "deepseek-v3-mild"     # the pages share the loads
    assert at.selectbox(key="cluster:cluster").value == "prefill-4x8"        # and the cluster
    at.switch_page("views/explore.py").run()
    _clean(at)
    assert at.selectbox(key="loads:dataset").value == "deepseek-v3-mild"
    assert at.selectbox(key="explore:solver").value == "kk_swap"
    assert at.selectbox(key="explore:opt:policy").value == "global"
    mild = load_dataset("deepseek-v3-mild").loads
    res = solve(_problem(mild), "kk_swap", policy="global")
    assert next(m.value for m in at.metric if m.label == "Imbalance") == f"{res.score.imbalance_mean:.4f}"


def test_2_cluster_edits_are_shared_by_the_pages():
    at = _app().run()
    at.selectbox(key="cluster:cluster").set_value("decode-ep64").run()
    at.switch_page("views/over_time.py").run()
    _clean(at)
    assert at.number_input(key="cluster:gpus").value == 64 and at.number_input(key="cluster:nodes").value == 8


# 3. hierarchical against global ---------------------------------------------------------

@pytest.mark.slow
def test_3_compare_runs_both_policies_and_says_what_hierarchical_costs(skewed):
    at = _app().run()
    at.switch_page("views/compare.py").run()
    assert at.multiselect(key="compare:policies").value == ["hierarchical", "global"]
    at.multiselect(key="compare:solvers").set_value(["kk_swap"]).run()
    at.button(key="compare:run").click().run()
    _clean(at)
    table = at.dataframe[0].value
    assert table["solver"].tolist() == ["kk_swap (hierarchical)", "kk_swap (global)"]
    glob = solve(_problem(skewed, 0, 12), "kk_swap", policy="global")
    assert table.iloc[1]["gap_mean"] == pytest.approx(glob.gap_mean)
    assert any("hierarchical policy keeps each expert group" in i.value for i in at.info)


def test_3_explore_hints_when_the_gap_is_the_policys_cost():
    at = _app().run()
    assert any("hierarchical policy's cost" in i.value for i in at.info)
    at.selectbox(key="explore:opt:policy").set_value("global").run()
    assert not any("hierarchical policy's cost" in i.value for i in at.info)


@pytest.mark.slow
def test_3_over_time_plans_with_the_chosen_policy():
    from solvers.dynamics import simulate

    at = _app().run()
    at.switch_page("views/over_time.py").run()
    at.selectbox(key="over_time:policy").set_value("global").run()
    at.button(key="over_time:run").click().run()
    _clean(at)
    totals = at.dataframe[1].value
    trace = load_dataset("deepseek-v3-skewed").loads
    expected = simulate(trace, num_replicas=288, num_groups=8, num_nodes=4, num_gpus=32, every=3,
                        solver_options={"policy": "global"})
    assert totals.iloc[0]["setting"] == "every 3"
    assert totals.iloc[0]["mean_imbalance"] == pytest.approx(float(expected.imbalance[3:].mean()))
    reb = at.dataframe[-1].value                                            # the rebalances table, in GB
    assert "GB" in reb.columns and np.allclose(reb["GB"], reb["bytes"] / 1e9)


@pytest.mark.slow
def test_3_simulate_policy_flag_is_the_planners_policy_option(capsys):
    args = ["simulate", "--loads", "deepseek-v3-skewed", "--model", "deepseek-v3", "--every", "6", "--json"]
    assert cli(args + ["--policy", "global"]) == 0
    flag = json.loads(capsys.readouterr().out)
    assert cli(args + ["-O", "policy=global"]) == 0
    option = json.loads(capsys.readouterr().out)
    assert cli(args) == 0
    auto = json.loads(capsys.readouterr().out)
    key = "mean_imbalance"
    pick = (lambda d: d["totals"][key]) if "totals" in flag else (lambda d: d[key])
    assert pick(flag) == pick(option) and pick(flag) < pick(auto)
    assert cli(args + ["--policy", "global", "-O", "policy=hierarchical"]) == 2
    assert "--policy global contradicts" in capsys.readouterr().err


# 4. Stop keeps the finished results -----------------------------------------------------

def test_4_stop_keeps_finished_results_and_says_stopped(monkeypatch):
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    from app import cache

    real, calls = cache.solve, []

    def stopped_on_the_second(problem, solver, options, extra=None):
        calls.append(solver)
        if len(calls) == 2:          # what Streamlit raises in the script when Stop asks for a rerun
            raise StopException()
        return real(problem, solver, options, extra)

    at = _app().run()
    at.switch_page("views/compare.py").run()
    at.multiselect(key="compare:solvers").set_value(["deepseek", "kk_swap"]).run()
    at.multiselect(key="compare:policies").set_value(["global"]).run()
    monkeypatch.setattr(cache, "solve", stopped_on_the_second)
    at.button(key="compare:run").click().run()
    monkeypatch.setattr(cache, "solve", real)
    at.button(key="compare:stop").click().run()                             # the rerun Stop asks for
    _clean(at)
    assert any(w.value.startswith("Stopped: 1 of 2 run(s) finished") for w in at.warning)
    assert at.dataframe[0].value["solver"].tolist() == ["deepseek (global)"]


# 5. exact solvers say what happened -------------------------------------------------------

def test_5_exact_solver_reports_message_returned_layers_reason_and_proof():
    pytest.importorskip("highspy")
    at = _app().run()
    at.selectbox(key="explore:solver").set_value("highs").run()
    assert any("exact models prove optima" in i.value.lower() for i in at.info)     # before it runs, too
    at.button(key="explore:run").click().run()
    _clean(at)
    report = next(b.value for b in [*at.warning, *at.info] if "Returned:" in b.value)
    assert "58 layer(s) time_limit" in report                              # the library's message
    assert "layer(s) warm start" in report and "Why, on" in report and "model not built in time" in report
    assert "Proven: 0 of 58 layer(s)" in report and "Mixtral-8x7B" in report


# 6. Over time fits the shipped traces -----------------------------------------------------

@pytest.mark.slow
def test_6_default_settings_run_on_a_32_step_trace_and_are_scored_on_the_same_steps():
    at = _app().run()
    at.switch_page("views/over_time.py").run()
    at.selectbox(key="loads:dataset").set_value("deepseek-v3-shifting-mix").run()
    at.button(key="over_time:run").click().run()
    _clean(at)
    assert not at.error
    totals = at.dataframe[1].value
    assert len(totals) == 6 and totals["steps_scored"].nunique() == 1
    assert list(totals.columns[:2]) == ["setting", "frontier"]


def test_6_a_blank_window_is_said_out_loud():
    from app.views.over_time import blank_window_note, default_settings

    assert "last 16 steps" in blank_window_note("t", {"threshold": 1.2})
    assert blank_window_note("t", {"threshold": 1.2, "window": 4}) is None
    rows = default_settings(32)
    assert (rows["every"].dropna() < 32).all() and rows["window"].dropna().tolist() == [4]


def test_6_replay_totals_on_common_steps_equal_the_simulators_own_from_there():
    from app.compute import common_start, replay_totals
    from solvers.dynamics import simulate

    trace = load_dataset("olmoe-1b-7b-bursty").loads
    a = simulate(trace, num_replicas=72, num_gpus=8, every=10)
    b = simulate(trace, num_replicas=72, num_gpus=8, every=40)
    start = common_start([a, b])
    assert start == 40
    t = replay_totals(a, start)
    assert t["steps_scored"] == trace.shape[0] - 40 == replay_totals(b, start)["steps_scored"]
    assert t["mean_imbalance"] == pytest.approx(float(a.imbalance[40:].mean()))
    assert replay_totals(b, start)["mean_imbalance"] == pytest.approx(b.totals()["mean_imbalance"])


# 7. the app recommends as the CLI does --------------------------------------------------

@pytest.mark.slow
def test_7_recommender_form_gives_the_clis_answer(capsys):
    from solvers.bench.recommend import recommend

    at = _app().run()
    at.switch_page("views/results.py").run()
    assert at.number_input(key="results:layers").value == 58
    at.button[0].click().run()
    _clean(at)
    cli_rec = recommend(None, experts=256, replicas=288, gpus=32, nodes=4, groups=8, time_budget=1.0, layers=58)
    assert at.success[0].value.startswith(f"use {cli_rec.solver} ")
    assert cli(["recommend", "--experts", "256", "--replicas", "288", "--gpus", "32", "--nodes", "4", "--groups", "8",
                "--layers", "58", "--time-budget", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"use {cli_rec.solver} ")


# 8. the app's SGLang export is the placement in force ---------------------------------------

def test_8_sglang_export_loads_back_as_the_current_placement_and_in_eplb_score(tmp_path, skewed, capsys):
    from app.exports import plan_downloads

    at = _app().run()
    at.segmented_control(key="explore:view").set_value("Download").run()
    offset = at.number_input(key="explore:offset:deepseek-v3").value
    assert offset == 3                                                      # DeepSeek-V3's dense layers
    problem = _problem(skewed)
    res = solve(problem, "deepseek")
    d = next(d for d in plan_downloads(res.plan, problem, policy=res.policy, solver="deepseek", options={},
                                       metrics={}, layer_offset=offset) if "SGLang" in d.label)
    data = d.build()
    assert len(json.loads(data)["physical_to_logical_map"]) == 58 + 3
    at.segmented_control(key="explore:view").set_value("Per-GPU load").run()
    at.toggle(key="explore:previous_on").set_value(True).run()
    at.file_uploader(key="explore:previous").set_value((d.filename, data, "application/json"))
    at.run()
    _clean(at)
    assert not at.error
    assert next(m.value for m in at.metric if m.label == "Moves") == "0"
    assert any("first 3 row(s) (dense layers) skipped" in c.value for c in at.caption)
    path = tmp_path / d.filename
    path.write_bytes(data)
    assert cli(["score", "--loads", "deepseek-v3-skewed", "--plan", str(path), "--gpus", "32", "--nodes", "4",
                "--groups", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["imbalance_mean"] == pytest.approx(res.score.imbalance_mean)


# 9. charts --------------------------------------------------------------------------------

@pytest.mark.slow
def test_9_layer_slider_follows_a_new_solve_to_its_worst_layer(skewed):
    at = _app().run()
    first = solve(_problem(skewed), "deepseek")
    assert _layer(at) == int(torch.argmax(first.score.imbalance))
    at.selectbox(key="explore:solver").set_value("kk_swap").run()
    second = solve(_problem(skewed), "kk_swap")
    assert _layer(at) == int(torch.argmax(second.score.imbalance))


def test_9_compare_colours_are_the_solvers_own_and_the_gap_chart_uses_kind_colours():
    from app import figures

    at = _app().run()
    at.switch_page("views/compare.py").run()
    at.multiselect(key="compare:solvers").set_value(["deepseek", "kk_swap"]).run()
    at.multiselect(key="compare:policies").set_value(["global"]).run()
    at.button(key="compare:run").click().run()
    _clean(at)
    charts = _charts(at)
    runtime = charts["compare:chart:time"]["data"][0]["marker"]["color"]
    assert runtime == [figures.solver_color("deepseek"), figures.solver_color("kk_swap")]
    gap_colours = {t["marker"]["color"] for t in charts["compare:chart:gap"]["data"]}
    assert gap_colours <= set(figures.KIND_COLORS.values())
    assert not gap_colours & {figures.solver_color("deepseek"), figures.solver_color("kk_swap")}
    side = charts["compare:chart:gpus"]["data"]
    assert [t["type"] for t in side] == ["scatter", "scatter"]             # lines, not 2 x 32 grouped bars
    assert [t["line"]["color"] for t in side] == runtime
    layers = charts["compare:chart:layers"]["data"]
    assert [t["line"]["color"] for t in layers] == runtime                  # the same colours on every chart
    cols = at.dataframe[0].value.columns
    from app.views.compare import TABLE_COLUMNS

    assert {c for c in cols if c not in ("options", "message")} <= set(TABLE_COLUMNS)   # every column labelled


def test_9_node_panel_has_axis_titles_and_no_label_over_its_bars():
    at = _app().run()
    layout = _charts(at)["explore:chart:bars"]["layout"]
    assert layout["yaxis2"]["title"]["text"] == "tokens per node"
    assert layout["xaxis2"]["title"]["text"].startswith("node (dashed: mean ")
    assert not [a for a in layout.get("annotations", []) if a.get("xref") == "x2 domain"]


# 10. text -----------------------------------------------------------------------------------

def test_10_scenario_text_follows_the_scenario():
    from solvers.workloads.generators import SCENARIOS

    at = _app().run()
    at.radio(key="loads:source").set_value("Generate").run()
    at.selectbox(key="loads:gen_scenario").set_value("bursty").run()
    _clean(at)
    assert any(SCENARIOS["bursty"].description in c.value for c in at.sidebar.caption)
    assert not any(SCENARIOS["skewed"].description in c.value for c in at.sidebar.caption)


def test_10_steps_slider_shows_the_steps_the_caption_names():
    at = _app().run()
    slider = at.slider(key="explore:window:deepseek-v3-skewed:24")
    assert slider.max == 23 and tuple(slider.value) == (0, 23)
    assert "planning on steps 0..23" in at.caption[0].value
    slider.set_value((4, 9)).run()
    assert "planning on steps 4..9" in at.caption[0].value


def test_10_edited_shape_makes_the_preset_custom_and_groups_are_explained():
    at = _app().run()
    assert "auto policy: hierarchical" in " ".join(c.value for c in at.sidebar.caption)
    at.number_input(key="cluster:nodes").set_value(2).run()
    _clean(at)
    assert at.selectbox(key="cluster:cluster").value == "Custom"
    at.number_input(key="cluster:groups").set_value(7).run()
    text = " ".join(c.value for c in at.sidebar.caption)
    assert "auto policy: global, because 7 expert groups do not split evenly over 2 nodes" in text


def test_10_an_upload_is_not_taken_for_a_model_because_of_its_expert_count(tmp_path):
    path = tmp_path / "t.npz"
    np.savez(path, loads=load_dataset("olmoe-1b-7b-drifting").loads[:4].numpy())
    at = _app().run()
    at.radio(key="loads:source").set_value("Upload").run()
    assert any("Upload a loads file" in i.value for i in at.main.info)          # said in the main area too
    at.file_uploader(key="explore:upload").set_value(("trace.npz", path.read_bytes(), "application/octet-stream"))
    at.run()
    _clean(at)
    assert at.selectbox(key="cluster:model").value == "(none)"
    assert any("match OLMoE-1B-7B" in c.value for c in at.sidebar.caption)


# 11. CLI messages -----------------------------------------------------------------------------

def _err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_11_cli_messages(tmp_path, capsys):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(bytes(range(7, 250)))
    (tmp_path / "x.json").write_text("{}")               # the plan exists: the loads are what is refused
    assert cli(["score", "--loads", str(junk), "--plan", str(tmp_path / "x.json")]) == 2
    assert "not a torch file" in _err(capsys)
    assert cli(["simulate", "--loads", "deepseek-v3-skewed@30:40", "--model", "deepseek-v3", "--every", "4"]) == 2
    assert "the window 30:40 selects no step: the trace has 24 steps (0..23)" in _err(capsys)
    assert cli(["plan", "--model", "nope"]) == 2
    line = _err(capsys)
    assert line.startswith("eplb: error: argument --model") and line.count("eplb") == 2 and "(eplb plan --help)" in line
    assert cli(["recommend", "--experts", "256", "--replicas", "288", "--gpus", "32", "--policy", "auto"]) == 2
    assert "choose from 'any', 'hierarchical', 'global'" in _err(capsys)
    assert cli(["datasets"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[:2] == ["name", "steps"]


def test_11_score_per_gpu_is_a_labelled_summary_without_float_noise(tmp_path, capsys):
    plan = tmp_path / "p.json"
    assert cli(["plan", "--loads", "deepseek-v3-skewed", "--model", "deepseek-v3", "--replicas", "288", "--nodes", "4",
                "--gpus", "32", "--policy", "global", "--out", str(plan)]) == 0
    capsys.readouterr()
    assert cli(["score", "--loads", "deepseek-v3-skewed", "--plan", str(plan), "--per-gpu"]) == 0
    out = capsys.readouterr().out
    assert "e-1" not in out                                                 # no 1e-17 noise
    rows = [ln for ln in out.splitlines() if ln[:5].strip().isdigit()]
    assert len(rows) == 58 and "hottest" in out and "GPU" in rows[0]
    # every GPU has its line (the help says every GPU), and no two cells run together
    gpus = [ln for ln in out.splitlines() if ln.startswith("n") and "/GPU " in ln.split("  ")[0]]
    assert [int(ln.split()[0].split("GPU")[0][1:-1]) for ln in gpus] == [g // 8 for g in range(32)]
    assert all(re.search(r"\d\.\d{3}n\d", ln) is None for ln in rows)


def test_11_compare_out_says_only_what_it_wrote(tmp_path, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_plotly(name, *a, **k):
        if name.startswith("plotly"):
            raise ImportError(name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_plotly)
    assert cli(["compare", "--loads", "readme-example", "--replicas", "16", "--groups", "4", "--nodes", "2", "--gpus",
                "8", "--solvers", "deepseek", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "compare.csv").exists() and not (tmp_path / "compare.html").exists()
    assert "compare.html" not in out.replace("no compare.html", "") and "plotly is not installed" in out


# 4. Stop ends a running solver -----------------------------------------------------------

class _Stop(Exception):
    """What Streamlit raises in the script at its next st call once Stop asked for a rerun."""


def test_4_a_stopped_solve_is_killed_not_left_running(skewed):
    """The child solving cpsat on DeepSeek-V3 4 x 8 with a 60 s limit (58 models of about
    74,000 variables: nothing a quarter second builds) is killed at the first progress call
    that raises, and the error of a bad option comes back as the library raised it."""
    import os

    from app import worker
    from solvers.errors import OptionError

    pids = []

    def stop(elapsed: float, pid: int) -> None:
        pids.append(pid)
        raise _Stop()

    with pytest.raises(_Stop):
        worker.run_stoppable(_problem(skewed), "cpsat", {"time_limit": 60.0}, stop)
    assert len(pids) == 1
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)                                                 # gone, not finishing its 60 s
    with pytest.raises(OptionError) as err:
        worker.run_stoppable(_problem(skewed), "cpsat", {"time_limit": -1.0}, lambda e, p: None)
    assert err.value.param == "time_limit" and str(err.value).startswith("time_limit: ")


def test_4_explore_says_a_stopped_solver_was_stopped_and_does_not_restart_it():
    from app import worker

    at = _app().run()
    assert at.button(key="explore:stop").disabled is True                   # deepseek: milliseconds, nothing to stop
    at.selectbox(key="explore:solver").set_value("best").run()
    assert at.button(key="explore:stop").disabled is True                   # 1 s: run in the server
    at.session_state["explore:running"] = "best"                            # as a run that Stop ended leaves it
    at.number_input(key="explore:best:time_limit").set_value(worker.IN_PROCESS_LIMIT_S + 3).run()
    _clean(at)
    assert at.button(key="explore:stop").disabled is False                  # longer: a child that Stop kills
    assert any(w.value.startswith("Stopped best") for w in at.warning)
    assert "explore:chart:bars" not in _charts(at)                          # not restarted by the rerun
    assert worker.stoppable("cpsat") and worker.stoppable("certify") and not worker.stoppable("kk_swap")


def test_8_a_plan_of_other_loads_is_refused_with_a_hint(skewed):
    problem = Problem(skewed[:, :50].sum(0).double(), 288, 8, 4, 32)          # 50 layers, not 58
    doc = {"physical_to_logical_map": solve(problem, "deepseek").plan.phy2log.tolist()}
    at = _app().run()
    at.toggle(key="explore:previous_on").set_value(True).run()
    at.file_uploader(key="explore:previous").set_value(("short.json", json.dumps(doc).encode(), "application/json"))
    at.run()
    _clean(at)
    assert len(at.error) == 1 and at.error[0].value.startswith("previous: short.json places 256 experts on 50 layer(s)")
    assert "plan of another model" in at.error[0].value


def test_9_every_registered_solver_has_its_own_colour():
    from app import figures
    from solvers.registry import solver_names

    colours = [figures.solver_color(n) for n in solver_names()]
    assert len(set(colours)) == len(colours)
    assert figures.solver_color("kk_swap (global)") == figures.solver_color("kk_swap")
