"""Image data as users partition it, in the workflow: FEMNIST-62 by writer (kind femnist62) and
Dirichlet partitions of it (kind dirichlet), their config checks, their jobs' arguments, and a build
and a short training through Snakemake."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from fedsim.planning import jobs
from fedsim.planning.configcheck import check_partition_pools
from fedsim.planning.experiments import ConfigError, dataset_sources

from helpers.leaf_files import write_leaf_json
from helpers.workflow import copy_workflow, default_config, snakemake, write_config
from helpers.workflow import config_error as check_error

TRAINING = {"lr": 0.003, "batch_size": 10, "rounds": 2, "fedprox_mu": 1}


def leaf_folder(root, writers, seed):
    """A LEAF data folder of `writers` writers, 40 images each of 62 classes, split 36 / 4."""
    rng = np.random.default_rng(seed)
    for split, rows in (("train", 36), ("test", 4)):
        users = {f"f{seed:02d}{w:02d}_00": ([rng.random(784).round(3).tolist() for _ in range(rows)],
                                            rng.integers(0, 62, rows).tolist()) for w in range(writers)}
        write_leaf_json(root / split / f"all_data_0_niid_05_keep_0_{split}_9.json", users)
    return str(root)


def image_config(folders, **partition):
    cfg = default_config()
    cfg["seeds"] = [0]
    cfg["datasets"] = {
        "femnist62": {"kind": "femnist62", "json": folders, **TRAINING},
        "femnist62_dir": {"kind": "dirichlet", "pool": "femnist62", "alpha": 0.3, "devices": 20,
                          "min_partition_size": 5, **TRAINING, **partition},
        "femnist62_hsu": {"kind": "dirichlet", "pool": "femnist62", "scheme": "per_device", "alpha": 1.0,
                          "devices": 10, **TRAINING},
    }
    cfg["experiments"] = {"short": {"datasets": ["femnist62_dir", "femnist62_hsu"], "methods": ["fedavg"],
                                    "clients_per_round": 2, "epochs": 1, "rounds": 1}}
    return cfg


def error_of(tmp_path, cfg):
    work = copy_workflow(tmp_path / "wf")
    write_config(work, cfg)
    return check_error(work)


@pytest.mark.parametrize("change, message", [
    ({"alpha": 0}, "Config error at datasets.femnist62_dir.alpha: 0 is less than or equal to the minimum of 0"),
    ({"alpha": -0.5}, "Config error at datasets.femnist62_dir.alpha:"),
    ({"pool": "mnist"}, "Config error at datasets.femnist62_dir.pool: unknown dataset 'mnist'"),
    ({"pool": "femnist62_hsu"}, "Config error at datasets.femnist62_dir.pool: femnist62_hsu is of kind dirichlet"),
    ({"scheme": "by_writer"}, "Config error at datasets.femnist62_dir.scheme: 'by_writer' is not one of"),
    ({"min_partition_size": 0}, "Config error at datasets.femnist62_dir.min_partition_size"),
    ({"devices": None}, "Config error at datasets.femnist62_dir.devices: required key is missing"),
])
def test_bad_partitions_are_one_config_line(tmp_path, change, message):
    cfg = image_config(["leaf"])
    entry = cfg["datasets"]["femnist62_dir"]
    entry.update({k: v for k, v in change.items() if v is not None})
    for key in (k for k, v in change.items() if v is None):
        del entry[key]
    error = error_of(tmp_path, cfg)
    assert error is not None and error.startswith(message) and "\n" not in error, error


def test_a_partition_too_big_for_its_built_pool_is_refused_before_any_job():
    """common.smk hands check_partition_pools the built pool's sample count (None before it is built)
    and stops with the ConfigError's line."""
    cfg = image_config(["leaf"])
    entry = cfg["datasets"]["femnist62_dir"]
    entry.update(scheme="per_class", max_retries=10)
    cfg["datasets"]["femnist62_hsu"].update(min_partition_size=10, max_retries=10)
    check_partition_pools(cfg, lambda pool: None)  # pool not built: nothing to say yet
    check_partition_pools(cfg, lambda pool: 200)   # 20 devices x 5, 10 x 10
    with pytest.raises(ConfigError) as err:
        check_partition_pools(cfg, lambda pool: 99)
    assert str(err.value) == ("Config error at datasets.femnist62_dir: devices: 20 devices of at least "
                              "min_partition_size 5 samples need 100, but the pool holds only 99 (the pool femnist62)")


def test_the_jobs_arguments_and_sources():
    cfg = image_config(["a", "b"])
    cfg["datasets"]["femnist62_nist"] = {"kind": "femnist62", "fraction": 0.05, "min_samples": 0,
                                         "min_samples_rule": "more_than", "train_fraction": 0.9, "seed": 0, **TRAINING}
    cfg["datasets"]["femnist62"]["test_only"] = "drop"
    cfg["datasets"]["femnist62_dir"].update(scheme="per_class", self_balancing=False, max_retries=10,
                                            train_fraction=0.9, seed=0, repeats="drop")
    cfg["datasets"]["femnist62_hsu"].update(min_partition_size=10, self_balancing=True, max_retries=10,
                                            train_fraction=0.9, seed=0, repeats="keep")
    def entry(name):
        return json.loads(jobs.build_entry(cfg, name))

    # from LEAF folders only test_only is read (their sampling is done); from NIST, LEAF's sampling
    assert set(entry("femnist62")) == {"kind", "json", "test_only"}
    assert entry("femnist62_nist") == {"kind": "femnist62", "fraction": 0.05, "min_samples": 0,
                                       "min_samples_rule": "more_than", "train_fraction": 0.9, "seed": 0}
    assert entry("femnist62_dir") == {"kind": "dirichlet", "pool": "femnist62", "devices": 20, "alpha": 0.3,
                                      "scheme": "per_class", "min_partition_size": 5, "train_fraction": 0.9, "seed": 0,
                                      "repeats": "drop", "max_retries": 10, "self_balancing": False}
    # the per_class settings are not read by a per_device partition: editing them rebuilds nothing
    assert entry("femnist62_hsu") == {"kind": "dirichlet", "pool": "femnist62", "devices": 10, "alpha": 1,
                                      "scheme": "per_device", "min_partition_size": 10, "train_fraction": 0.9,
                                      "seed": 0, "repeats": "keep"}
    assert dataset_sources(cfg, "femnist62") == [] and dataset_sources(cfg, "femnist62_dir") == []
    cfg["datasets"]["femnist62_dir"]["pool"] = "femnist62_nist"
    assert dataset_sources(cfg, "femnist62_dir") == ["nist_by_class", "nist_by_write"]


@pytest.mark.workflow
def test_femnist62_and_its_partitions_build_and_train(tmp_path):
    """Two LEAF folders (one writer in both), FEMNIST-62 imported from them, two Dirichlet partitions
    of it, one FedAvg round on each; then a partition its built pool cannot hold stops the next call
    in one line."""
    made = tmp_path / "made"
    folders = [leaf_folder(made / "a", 4, seed=1), leaf_folder(made / "b", 3, seed=2)]
    work = copy_workflow(tmp_path / "wf", with_src=True)
    cfg = image_config(folders)
    write_config(work, cfg)
    code, out = snakemake(work, "--cores", "2", timeout=900)
    assert code == 0, out[-3000:]
    rows = {r["dataset"]: r for r in csv.DictReader(open(work / "results/summary/datasets.csv"))}
    assert {d: int(r["devices"]) for d, r in rows.items()} == {"femnist62_dir": 20, "femnist62_hsu": 10}
    assert int(rows["femnist62_hsu"]["samples"]) == 280  # 7 writers x 40, dealt whole to 10 equal devices
    record = json.loads(next(work.glob("results/runs/femnist62_dir/fedavg/*/run.json")).read_text())
    prov = record["dataset"]["provenance"]
    assert (prov["scheme"], prov["alpha"], prov["devices"], prov["seed"]) == ("per_class", 0.3, 20, 0)
    assert prov["pool"]["name"] == "femnist62" and record["dataset"]["kind"] == "femnist"
    assert record["result"]["rounds_completed"] == 1
    log = (work / "results/logs/build_dataset/femnist62_hsu.log").read_text()
    assert "10 devices from 280 samples" in log and "per_device, alpha 1" in log

    cfg["datasets"]["femnist62_hsu"]["devices"] = 29  # 280 // 29 = 9 < min_partition_size 10
    write_config(work, cfg)
    code, out = snakemake(work, "--cores", "2", "--dry-run")
    assert code != 0
    assert ("Config error at datasets.femnist62_hsu: devices: 29 equal devices of a 280-sample pool hold 9 samples "
            "each, fewer than min_partition_size 10 (the pool femnist62)") in out
