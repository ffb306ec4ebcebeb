"""The shipped datasets: catalog, loading by name, exact regeneration, size budget."""
from __future__ import annotations

import shlex

import pytest
import torch

from solvers.cli import main
from solvers.errors import OptionError
from solvers.cluster import MODELS
from solvers.workloads import SCENARIOS, dataset_path, list_datasets, load_dataset, read_trace
from solvers.workloads.catalog import GENERATED, datasets_dir, generate_command, loads_sha256


def test_catalog_lists_every_file_with_its_shape():
    entries = list_datasets()
    names = [e["name"] for e in entries]
    assert len(names) == len(set(names)) and set(GENERATED) <= set(names) and "readme-example" in names
    for e in entries:
        path = dataset_path(e["name"])
        assert path.is_file() and e["description"]
        if e["kind"] == "generated":
            assert e["model"] in MODELS and e["scenario"] in SCENARIOS
            assert e["command"] == generate_command(e["name"])
            assert e["bytes"] == path.stat().st_size


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_every_generated_dataset_loads_by_name(name):
    entry = next(e for e in list_datasets() if e["name"] == name)
    tr = load_dataset(name)
    assert tuple(tr.loads.shape) == (entry["steps"], entry["num_layers"], entry["num_experts"])
    assert tr.meta["dataset"] == name and tr.meta["model"] == entry["model"]
    assert bool((tr.loads.sum(-1) == entry["tokens_per_step"] * entry["top_k"]).all())
    assert loads_sha256(tr.loads) == entry["loads_sha256"]


def test_readme_example_is_in_the_catalog():
    tr = load_dataset("readme-example")
    assert tr.loads[0].tolist()[0][:3] == [90, 132, 40]


def test_the_recorded_command_regenerates_a_dataset_exactly(tmp_path, capsys):
    name = "mixtral-8x7b-shifting-mix"
    entry = next(e for e in list_datasets() if e["name"] == name)
    argv = shlex.split(entry["command"])[1:]                        # drop "eplb"
    argv[argv.index("--out") + 1] = str(tmp_path / "again.npz")
    assert main(argv) == 0
    again = read_trace(tmp_path / "again.npz")
    assert loads_sha256(again.loads) == entry["loads_sha256"]
    assert torch.equal(again.loads, load_dataset(name).loads)


def test_shipped_data_stays_small():
    total = sum(p.stat().st_size for p in datasets_dir().rglob("*") if p.is_file())
    assert total < 6_000_000
    assert not (datasets_dir() / "__init__.py").exists()            # not a Python package


def test_unknown_dataset_name():
    with pytest.raises(OptionError) as err:
        load_dataset("deepseek-v4")
    assert err.value.param == "dataset" and "deepseek-v3-mild" in str(err.value)


def test_catalog_directory_override(tmp_path, monkeypatch):
    monkeypatch.setenv("EPLB_DATASETS", str(tmp_path))
    from solvers.errors import LoadFileError

    with pytest.raises(LoadFileError, match="no dataset catalog"):
        list_datasets()
