"""A user's own data (fedsim.data.arrays, kind `arrays`): an .npz of x and y, with or without device ids,
imported as a dataset file or a pool; what it cannot read is one line naming the file and the
array; a 3 x 32 x 32 pool partitioned by Dirichlet trains LeNet-5 through the workflow."""

import csv

import numpy as np
import pytest

from fedsim.data.arrays import describe, import_arrays
from fedsim.data.format import FederatedDataset
from fedsim.data.partition import write_dirichlet

from helpers.workflow import config_error, copy_workflow, default_config, snakemake, write_config


def images(n=120, classes=4, shape=(3, 32, 32), seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, *shape), dtype=np.float32), rng.integers(0, classes, n)


@pytest.mark.parametrize("arrays, problem", [
    (lambda x, y: dict(y=y), "no `x` array"),
    (lambda x, y: dict(x=x), "no `y` array"),
    (lambda x, y: dict(x=x, y=y[:-1]), "`y` has shape (119,): expected (120,), one per row of `x`"),
    (lambda x, y: dict(x=x, y=y + 0.5), "`y` holds float64: expected integer labels"),
    (lambda x, y: dict(x=x[:, 0], y=y), "`x` has shape (120, 32, 32): expected n x d features or n x C x H x W"),
    (lambda x, y: dict(x=x, y=y, device=np.zeros(120)), "`device` holds float64: expected integer device ids"),
    (lambda x, y: dict(x=x, y=y, test=np.zeros(120, int)), "`test` holds int64: expected booleans"),
    (lambda x, y: dict(x=x, y=y, labels=y), "unknown array `labels`"),
    (lambda x, y: dict(x=x.astype(str), y=y), "`x` holds <U"),
])
def test_an_npz_it_cannot_read_is_one_line_naming_the_array(tmp_path, arrays, problem):
    path = tmp_path / "mine.npz"
    np.savez(path, **arrays(*images()))
    with pytest.raises(ValueError) as refused:
        import_arrays(path, tmp_path / "out.h5", name="mine")
    assert str(refused.value).startswith(f"{path}: ") and problem in str(refused.value), str(refused.value)
    assert "\n" not in str(refused.value) and not (tmp_path / "out.h5").exists()


@pytest.mark.parametrize("bad, problem", [
    (lambda x, y: x.__setitem__((37, 1, 2, 3), np.nan), "`x` row 37 holds nan: every value must be finite"),
    (lambda x, y: x.__setitem__((90, 0, 0, 0), -np.inf), "`x` row 90 holds -inf: every value must be finite"),
    (lambda x, y: y.__setitem__(5, -1), "`y` row 5 holds the label -1: labels are 0 .. classes - 1"),
])
def test_non_finite_pixels_and_negative_labels_are_refused_naming_the_row(tmp_path, bad, problem):
    """A NaN pixel was imported before: training then read as the method's divergence at round 0."""
    x, y = images()
    bad(x, y)
    path = tmp_path / "mine.npz"
    np.savez(path, x=x, y=y)
    with pytest.raises(ValueError) as refused:
        import_arrays(path, tmp_path / "out.h5", name="mine")
    assert str(refused.value) == f"{path}: {problem}"
    assert not (tmp_path / "out.h5").exists()


def test_labels_beyond_the_classes_given_are_refused_naming_the_row(tmp_path):
    x, y = images(classes=4)
    y[:] = np.arange(120) % 4
    path = tmp_path / "mine.npz"
    np.savez(path, x=x, y=y)
    with pytest.raises(ValueError) as refused:
        import_arrays(path, tmp_path / "out.h5", name="mine", classes=3)
    assert str(refused.value) == f"{path}: `y` row 3 holds the label 3: labels are 0 .. classes - 1 (classes 3)"
    assert not (tmp_path / "out.h5").exists()
    import_arrays(path, tmp_path / "ten.h5", name="mine", classes=10)  # classes the file does not all hold
    with FederatedDataset(tmp_path / "ten.h5") as data:
        assert data.num_classes == 10


def test_the_cli_refuses_a_nan_pixel_in_one_line(tmp_path, capsys):
    from fedsim import cli

    x, y = images()
    x[3, 0, 0, 0] = np.nan
    np.savez(tmp_path / "mine.npz", x=x, y=y)
    code = cli.main(["import-arrays", "--npz", str(tmp_path / "mine.npz"), "--out", str(tmp_path / "out.h5")])
    err = capsys.readouterr().err
    assert code == 2 and err == (f"fedsim import-arrays: error: {tmp_path / 'mine.npz'}: `x` row 3 holds nan: "
                                 "every value must be finite\n")
    assert not (tmp_path / "out.h5").exists()


def test_device_ids_and_test_rows_are_the_files(tmp_path):
    x, y = images(shape=(20,))
    device = np.repeat([7, 3, 5], 40)
    test = np.tile(np.arange(40) % 4 == 0, 3)
    np.savez(tmp_path / "fed.npz", x=x, y=y, device=device, test=test)
    assert describe(tmp_path / "fed.npz") == {"samples": "features", "shape": (20,), "rows": 120, "devices": True,
                                              "test": True}
    import_arrays(tmp_path / "fed.npz", tmp_path / "fed.h5", name="fed")
    with FederatedDataset(tmp_path / "fed.h5") as data:
        assert (data.kind, data.num_devices, data.num_classes) == ("features", 3, int(y.max()) + 1)
        assert list(data.clients) == ["3", "5", "7"]  # in id order
        assert list(data.train_sizes) == [30] * 3 and list(data.test_sizes) == [10] * 3
        first = data.load("test", [0])  # device 3's test rows, in file order
        np.testing.assert_array_equal(first.x, x[40:80][test[40:80]])
        np.testing.assert_array_equal(first.y, y[40:80][test[40:80]])


def test_without_device_ids_it_is_a_pool_whose_repeats_are_dealt_once(tmp_path):
    x, y = images()
    x[100:110], y[100:110] = x[:10], y[:10]  # ten images twice, as FEMNIST's pool repeats some
    np.savez(tmp_path / "pool.npz", x=x, y=y)
    import_arrays(tmp_path / "pool.npz", tmp_path / "pool.h5", name="pool")
    with FederatedDataset(tmp_path / "pool.h5") as pool:
        assert (pool.kind, pool.num_devices, tuple(pool.feature_shape)) == ("images", 1, (3, 32, 32))
    dealt = {}
    for repeats in ("drop", "keep"):
        prov = write_dirichlet(tmp_path / "pool.h5", tmp_path / f"{repeats}.h5", devices=4, alpha=1.0,
                               min_partition_size=5, repeats=repeats)
        with FederatedDataset(tmp_path / f"{repeats}.h5") as data:
            rows = np.concatenate([data.load(split).x for split in ("train", "test")]).reshape(-1, 3 * 32 * 32)
        dealt[repeats] = (len(rows), len(np.unique(rows, axis=0)), prov["pool"]["repeated_rows_dropped"])
    assert dealt == {"drop": (110, 110, 10), "keep": (120, 110, 0)}


def arrays_config(npz, model="lenet5"):
    cfg = default_config()
    cfg["seeds"] = [0]
    hyper = dict(lr=0.05, batch_size=10, rounds=2, fedprox_mu=0)
    cfg["datasets"] = {"pool": dict(kind="arrays", npz=str(npz), **hyper),
                       "dir": dict(kind="dirichlet", pool="pool", devices=6, alpha=0.5, min_partition_size=5,
                                   model=model, **hyper)}
    cfg["experiments"] = {"mine": {"figure": "figure1", "datasets": ["dir"], "methods": ["fedavg"],
                                   "clients_per_round": 3, "epochs": 1}}
    return cfg


@pytest.mark.parametrize("change, line", [
    (lambda c: c["datasets"]["dir"].update(model="char_lstm"),
     "Config error at datasets.dir.model: char_lstm takes shakespeare samples; dir's samples are image"),
    (lambda c: c["experiments"]["mine"].update(datasets=["pool"]),
     "Config error at datasets.pool: {npz} has no `device` ids: it is a pool; let experiment mine run a kind: "
     "dirichlet entry with pool: pool"),
    (lambda c: c["datasets"]["pool"].update(npz="missing.npz"), "Config error at datasets.pool.npz: missing.npz: no "
                                                                 "such file"),
])
def test_the_config_check_reads_the_npz_before_any_job(tmp_path, change, line):
    workdir = copy_workflow(tmp_path / "wf")
    x, y = images()
    np.savez(tmp_path / "pool.npz", x=x, y=y)
    cfg = arrays_config(tmp_path / "pool.npz")
    change(cfg)
    write_config(workdir, cfg)
    assert config_error(workdir) == line.format(npz=tmp_path / "pool.npz")


@pytest.mark.workflow
def test_a_pool_of_colour_images_partitioned_by_dirichlet_trains_lenet5_through_the_workflow(tmp_path):
    workdir = copy_workflow(tmp_path / "wf", with_src=True)
    x, y = images()
    np.savez(tmp_path / "cifar_like.npz", x=x, y=y)
    write_config(workdir, arrays_config(tmp_path / "cifar_like.npz"))
    code, out = snakemake(workdir, "--cores", "2")
    assert code == 0, out
    run = workdir / "results" / "runs" / "dir" / "fedavg" / "mu0_K3_E1_lenet5_seed0"
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [row["round"] for row in rows] == ["0", "1", "2"]
    assert '"model": "lenet5"' in (run / "run.json").read_text()


def test_a_pool_is_refused_by_train_and_fedsim_run_naming_the_partition_to_make(tmp_path, capsys):
    """A pool is one device: `fedsim train` and fedsim.run refuse it in one line, as the workflow's
    config check does, where they would train it as one device (fedsim.run: before torch loads)."""
    import subprocess
    import sys

    from fedsim import cli

    from helpers.workflow import env

    x, y = images(shape=(5,))
    np.savez(tmp_path / "pool.npz", x=x, y=y)
    import_arrays(tmp_path / "pool.npz", tmp_path / "pool.h5", name="pool")
    pool = tmp_path / "pool.h5"
    line = (f"{pool} is a pool (an .npz imported without `device` ids: all its rows one device); deal it to "
            f"devices first, `fedsim partition-dirichlet --pool {pool} --devices N --alpha A --out partition.h5` "
            "(from Python: fedsim.partition_dirichlet), and train on that")
    argv = ["train", "--data", str(pool), "--method", "fedavg", "--clients-per-round", "1", "--rounds", "1",
            "--metrics", str(tmp_path / "m.csv"), "--info", str(tmp_path / "run.json")]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == f"fedsim train: error: {line}\n"
    assert not (tmp_path / "m.csv").exists()
    code = ("import sys, fedsim\n"
            "try:\n"
            f"    fedsim.run({str(pool)!r}, 'fedavg', clients_per_round=1, rounds=1)\n"
            "except ValueError as err:\n"
            "    print(err)\n"
            "print('torch' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [line, "False"]
    # a file imported with device ids trains
    np.savez(tmp_path / "fed.npz", x=x, y=y, device=np.arange(len(y)) % 3)
    import_arrays(tmp_path / "fed.npz", tmp_path / "fed.h5", name="fed")
    argv[2] = str(tmp_path / "fed.h5")
    assert cli.main(argv) == 0


@pytest.mark.workflow
def test_more_devices_than_an_unbuilt_pool_holds_is_the_only_error(tmp_path):
    """devices: 1000 for a 120-row .npz pool, nothing built yet: the .npz's header tells its rows, so
    Snakemake stops before any job with the one line (it used to build the pool, fail the partition,
    and fail the plan job too, whose own process stopped at the same check before writing its log)."""
    workdir = copy_workflow(tmp_path / "wf")
    x, y = images()
    np.savez(tmp_path / "pool.npz", x=x, y=y)
    cfg = arrays_config(tmp_path / "pool.npz")
    cfg["datasets"]["dir"]["devices"] = 1000
    write_config(workdir, cfg)
    code, out = snakemake(workdir, "--cores", "2")
    errors = [line for line in out.splitlines() if "error" in line.lower()]
    assert code != 0 and errors == ["Config error at datasets.dir: devices: 1000 devices, but the pool holds only "
                                    "120 samples (the pool pool)"], out
    assert not (workdir / "results" / "datasets").exists()


@pytest.mark.workflow
def test_a_jobs_own_process_leaves_the_pool_check_to_the_main_one(tmp_path):
    """A `run:` job (the plan) runs in a process of its own that reads the Snakefile again, maybe after
    the same call built the pool: the pool check is the main process's, so that job runs and writes
    its log (it used to stop at the check: `Error in rule plan ... Logfile ... not found`)."""
    workdir = copy_workflow(tmp_path / "wf")
    x, y = images()
    np.savez(tmp_path / "pool.npz", x=x, y=y)
    cfg = arrays_config(tmp_path / "pool.npz")
    write_config(workdir, cfg)
    code, out = snakemake(workdir, "--cores", "1", "results/datasets/pool.h5")
    assert code == 0, out
    cfg["datasets"]["dir"]["devices"] = 1000  # what the built pool cannot hold
    write_config(workdir, cfg)
    # the plan job as Snakemake's local executor spawns it (its --mode subprocess)
    code, out = snakemake(workdir, "--cores", "1", "--target-jobs", "plan:", "--allowed-rules", "plan", "--force",
                          "--mode", "subprocess")
    assert code == 0 and "Config error" not in out, out
    assert (workdir / "results/logs/plan/planned_runs.log").read_text() == "1 runs planned before tuning\n"


def test_the_dissimilarities_default_to_the_models_choice(tmp_path):
    """The metrics' gradient dissimilarities are the paper's diagnostics: on by default for MCLR, off for
    a CNN (they would double its evaluation), and computed for a CNN run that asks for them; run.json
    records the value the run took."""
    from fedsim import api

    x, y = images(n=80, shape=(1, 28, 28))
    np.savez(tmp_path / "mine.npz", x=x, y=y, device=np.arange(80) % 4)
    data = api.import_arrays(tmp_path / "mine.npz", tmp_path / "mine.h5", name="mine")
    runs = {(model, asked): api.run(data, "fedavg", rounds=1, clients_per_round=2, epochs=1, model=model,
                                    **({} if asked is None else {"dissimilarity": asked}))
            for model, asked in [("mclr", None), ("lenet5", None), ("lenet5", True)]}
    for (model, asked), (metrics, record) in runs.items():
        expected = model == "mclr" or asked is True
        assert metrics["grad_dissimilarity"].notna().all() == expected, (model, asked)
        assert record["config"]["dissimilarity"] is expected
