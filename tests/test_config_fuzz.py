"""Malformed configs, as a careless user writes them: each one stops Snakemake before any job,
with exactly one line `Config error at <key path>: <problem>`.

Each case edits the default config (as data, or as YAML text where the mistake only exists in
text: duplicate keys) and writes it as the workflow's config/config.yaml. Every case is checked in
this process, by the calls the Snakefile makes before any rule (helpers.workflow.config_error: a
Snakemake process costs seconds, a check milliseconds); a few, one for each place a mistake is
found, also go through a real Snakemake process, which must print that one line and start nothing.
"""

import math
from pathlib import Path

import pytest

from helpers.workflow import CONFIG, REPO, config_error, copy_workflow, default_config, snakemake, write_config


def at(path, value):
    """An edit setting the key `path` (a dotted path; [i] for list items) to `value` (missing
    mappings on the way are made)."""
    def edit(cfg):
        keys = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
        for key in keys[:-1]:
            cfg = cfg[key] if isinstance(key, int) else cfg.setdefault(key, {})
        cfg[keys[-1]] = value
    return edit


def drop(path):
    def edit(cfg):
        keys = path.split(".")
        for key in keys[:-1]:
            cfg = cfg[key]
        del cfg[keys[-1]]
    return edit


def append(path, value):
    """An edit appending `value` to the list at `path`."""
    def edit(cfg):
        for key in path.split("."):
            cfg = cfg[key]
        cfg.append(value)
    return edit


def rename(path, new_name):
    """An edit moving the key at `path` to `new_name` in the same mapping (last in its order)."""
    def edit(cfg):
        *parents, old_name = path.split(".")
        for key in parents:
            cfg = cfg[key]
        cfg[new_name] = cfg.pop(old_name)
    return edit


def both(*edits):
    def edit(cfg):
        for e in edits:
            e(cfg)
    return edit


def text(transform):
    """An edit of the YAML text itself."""
    transform.on_text = True
    return transform


JSON_SET = {"kind": "json", "train": "their/train", "lr": 0.01, "batch_size": 10, "rounds": 200, "fedprox_mu": 1}
INF, NAN = math.inf, math.nan

CASES = [
    # non-finite numbers
    ("lr_inf", at("datasets.synthetic_iid.lr", INF), "datasets.synthetic_iid.lr", "inf is not a finite number"),
    ("lr_nan", at("datasets.synthetic_iid.lr", NAN), "datasets.synthetic_iid.lr", "nan is not a finite number"),
    ("alpha_nan", at("datasets.synthetic_0_0.alpha", NAN), "datasets.synthetic_0_0.alpha", "not a finite number"),
    ("grid_inf", at("tuning.mu_grid[1]", INF), "tuning.mu_grid[1]", "not a finite number"),
    ("fraction_nan", at("tuning.fraction", NAN), "tuning.fraction", "not a finite number"),
    ("prox_minus_inf", at("datasets.synthetic_1_1.fedprox_mu", -INF), "datasets.synthetic_1_1.fedprox_mu", "-inf is not"),
    ("share_nan", at("experiments.figure3.clients_fraction.default", NAN), "experiments.figure3.clients_fraction.default",
     "not a finite number"),
    # floats (and booleans) where an integer is meant: 2.0 and 2 must never name two runs
    ("batch_2.5", at("datasets.synthetic_iid.batch_size", 2.5), "datasets.synthetic_iid.batch_size", "not of type 'integer'"),
    ("rounds_1.5", at("datasets.synthetic_iid.rounds", 1.5), "datasets.synthetic_iid.rounds", "not of type 'integer'"),
    ("rounds_2.0", at("datasets.synthetic_iid.rounds", 2.0), "datasets.synthetic_iid.rounds", "2.0 is not of type 'integer'"),
    ("devices_30.5", at("synthetic.devices", 30.5), "synthetic.devices", "not of type 'integer'"),
    ("epochs_2.0", at("experiments.figure1.epochs", 2.0), "experiments.figure1.epochs", "is not"),
    ("seed_1.0", at("seeds", [0, 1.0]), "seeds[1]", "1.0 is not of type 'integer'"),
    ("exp_seed_0.0", at("experiments.figure1.seeds", [0.0]), "experiments.figure1.seeds[0]", "not of type 'integer'"),
    ("k_list_float", at("experiments.figure2.clients_per_round", [1, 5.0]), "experiments.figure2.clients_per_round[1]",
     "is not"),
    ("features_60.0", at("synthetic.features", 60.0), "synthetic.features", "not of type 'integer'"),
    ("threads_1.0", at("simulator.threads", 1.0), "simulator.threads", "not of type 'integer'"),
    ("eval_3.0", at("datasets.synthetic_iid.eval_devices", 3.0), "datasets.synthetic_iid.eval_devices", "not of type"),
    ("rounds_true", at("datasets.synthetic_iid.rounds", True), "datasets.synthetic_iid.rounds", "True is not of type 'integer'"),
    ("iid_text", at("datasets.synthetic_iid.iid", "yes"), "datasets.synthetic_iid.iid", "not of type 'boolean'"),
    ("rounds_text", at("datasets.synthetic_iid.rounds", "200"), "datasets.synthetic_iid.rounds", "not of type 'integer'"),
    ("lr_text", at("datasets.synthetic_iid.lr", "1e-2"), "datasets.synthetic_iid.lr", "YAML reads 1e-3 as text"),
    # absurd sizes
    ("rounds_1e9", at("datasets.synthetic_iid.rounds", 10**9), "datasets.synthetic_iid.rounds", "above the ceiling of 100000"),
    # 1e8 devices x (e^6 + 50) samples x 61 floats x 4 bytes
    ("devices_1e8", at("synthetic.devices", 10**8), "synthetic.devices", "would make a dataset of about 11,064 GB"),
    ("dataset_devices_5e7", at("datasets.synthetic_0_0.devices", 5 * 10**7), "datasets.synthetic_0_0.devices", "GB"),
    ("exp_rounds_1e6", at("experiments.figure1.rounds", 10**6), "experiments.figure1.rounds", "above the ceiling"),
    ("seeds_300", at("seeds", list(range(300))), "experiments", "training runs are above the ceiling of 10,000"),
    ("huge_seed", at("seeds", [10**30]), "seeds[0]", "greater than the maximum of 4294967295"),
    ("negative_seed", at("seeds", [-1]), "seeds[0]", "less than the minimum of 0"),
    # what a run could not do, or where it must not write
    ("eval_too_many", at("datasets.synthetic_iid.eval_devices", 100), "datasets.synthetic_iid.eval_devices",
     "100 is more than the dataset's 30 devices"),
    ("eval_every_0", at("datasets.synthetic_iid.eval_every", 0), "datasets.synthetic_iid.eval_every",
     "0 is less than the minimum of 1"),
    ("eval_every_theory", at("datasets.synthetic_iid.eval_every", 5), "datasets.synthetic_iid.eval_every",
     "must be 1 for experiment theory, whose runs measure the theorems' constants every round"),
    # a grid of a method the experiment does not run is left unused, but checked
    ("grid_of_a_method_not_run", at("experiments.beyond.grids", {"feddyn": [-1]}), "experiments.beyond.grids.feddyn[0]",
     "bad method option alpha=-1.0: expected a number > 0"),
    ("grid_of_mu", at("experiments.beyond.grids", {"feddane_decayed": [0.1]}), "experiments.beyond.grids.feddane_decayed",
     "feddane_decayed is not tuned over an option of its own (its mu grid is `mu_grid`)"),
    ("grid_of_untuned", at("experiments.beyond.grids", {"scaffold": [0.1]}), "experiments.beyond.grids.scaffold",
     "scaffold is not tuned over an option of its own"),
    ("grid_value_out_of_domain", at("experiments.tuned_x", {"datasets": ["synthetic_iid"], "methods": ["feddyn"],
                                                            "clients_per_round": 10, "epochs": 1,
                                                            "grids": {"feddyn": [0.1, -1.0]}}),
     "experiments.tuned_x.grids.feddyn[1]", "alpha"),
    ("no_experiments", at("experiments", {}), "experiments", "should be non-empty"),
    ("results_root", at("results_dir", "/"), "results_dir", "'/' is a filesystem root"),
    ("results_here", at("results_dir", "."), "results_dir", "is the project folder"),
    ("results_here_slash", at("results_dir", "./"), "results_dir", "is the project folder"),
    ("raw_dir_empty", at("raw_dir", ""), "raw_dir", "should be non-empty"),
    # duplicate keys (YAML would silently keep the last)
    ("dup_experiment", text(lambda t: t + "  figure1: {figure: figure1, datasets: [synthetic_iid], methods: [fedavg],"
                                          " clients_per_round: 10, epochs: 1}\n"),
     "experiments.figure1", "duplicate key in config/config.yaml, line"),
    ("dup_top_level", text(lambda t: t + "seeds: [5]\n"), "seeds", "duplicate key"),
    ("dup_flow_key", text(lambda t: t.replace("{kind: synthetic, iid: true,", "{kind: synthetic, iid: true, lr: 0.1,")),
     "datasets.synthetic_iid.lr", "duplicate key"),
    # enums and types
    ("selection", at("simulator.selection", "random"), "simulator.selection", "'random' is not one of"),
    ("second_subset", at("simulator.second_subset", "other"), "simulator.second_subset", "is not one of"),
    ("rng", at("simulator.rng", "numpy"), "simulator.rng", "'numpy' is not one of"),
    ("device", at("simulator.device", "tpu"), "simulator.device", "is not one of"),
    ("init_number", at("simulator.init", 3), "simulator.init", "3 is not null or a path"),
    ("warm_text", at("simulator.warm_start", "yes"), "simulator.warm_start", "not of type 'boolean'"),
    ("max_runtime_zero", at("simulator.max_runtime", 0), "simulator.max_runtime", "0 is less than the minimum of 1"),
    ("max_runtime_text", at("simulator.max_runtime", "4h"), "simulator.max_runtime", "'4h' is not null (no cap) or minutes"),
    ("tuning_methods", at("tuning.methods", ["fedavg"]), "tuning.methods", "unknown key"),
    ("option_unknown_method", at("method_options.fedsgd", {"tau": 1.0}), "method_options.fedsgd", "unknown method"),
    ("option_unknown", at("method_options.feddane", {"decay": 1.0}), "method_options.feddane.decay",
     "bad method option 'decay': feddane takes correction"),
    ("option_value", at("method_options.feddane", {"correction": "bias"}), "method_options.feddane.correction",
     "expected one of exact, authors"),
    ("criterion_is_gone", at("tuning.criterion", "last_fraction_mean"), "tuning.criterion", "unknown key"),
    ("per_setting_1", at("tuning.per_setting", 1), "tuning.per_setting", "not of type 'boolean'"),
    ("x_axis", at("figures.x_axis", "time"), "figures.x_axis", "is not one of"),
    ("allow_large_text", at("allow_large", "yes"), "allow_large", "not of type 'boolean'"),
    ("kind", at("datasets.synthetic_iid.kind", "mnist"), "datasets.synthetic_iid.kind", "unknown kind 'mnist': the kinds are"),
    ("lr_zero", at("datasets.synthetic_iid.lr", 0), "datasets.synthetic_iid.lr", "less than or equal to the minimum"),
    ("batch_zero", at("datasets.synthetic_iid.batch_size", 0), "datasets.synthetic_iid.batch_size", "less than the minimum"),
    ("prox_negative", at("datasets.synthetic_iid.fedprox_mu", -1), "datasets.synthetic_iid.fedprox_mu", "less than the minimum"),
    ("train_fraction_1", at("synthetic.train_fraction", 1.0), "synthetic.train_fraction", "greater than or equal to the maximum"),
    ("one_class", at("synthetic.classes", 1), "synthetic.classes", "less than the minimum of 2"),
    ("iid_alpha", at("datasets.synthetic_iid.alpha", 1), "datasets.synthetic_iid.alpha", "must be 0 when iid is true"),
    ("bad_name", both(at("datasets.bad/name", dict(default_config()["datasets"]["synthetic_iid"]))), "datasets.bad/name",
     "invalid name"),
    ("figure9", at("experiments.figure1.figure", "figure9"), "experiments.figure1.figure", "'figure9' is not one of"),
    ("no_datasets", at("experiments.figure1.datasets", []), "experiments.figure1.datasets", "should be non-empty"),
    ("same_method_twice", at("experiments.figure1.methods", ["fedavg", "fedavg"]), "experiments.figure1.methods",
     "non-unique"),
    ("grid_negative", at("experiments.figure1.mu_grid", [-1]), "experiments.figure1.mu_grid[0]", "less than the minimum"),
    ("k_zero", at("experiments.figure1.clients_per_round", 0), "experiments.figure1.clients_per_round", "0 is less than the minimum of 1"),
    ("json_without_train", both(at("datasets.theirs", {k: v for k, v in JSON_SET.items() if k != "train"}),
                                at("experiments.figure1.datasets", ["theirs"])), "datasets.theirs.train",
     "required key is missing"),
    ("json_order", both(at("datasets.theirs", {**JSON_SET, "test": "t", "order": "random"}),
                        at("experiments.figure1.datasets", ["theirs"])), "datasets.theirs.order", "is not one of"),
    ("md5_short", at("sources.glove.md5", "xyz"), "sources.glove.md5", "'xyz' does not match"),
    ("mu_from_itself", at("experiments.figure2.mu_from", "figure2"), "experiments.figure2.mu_from",
     "'figure2' is not another experiment"),
    ("authors_rng_weighted", both(at("simulator.rng", "authors"), at("simulator.selection", "weighted"),
                                  at("simulator.second_subset", "same")), "simulator.selection",
     "must be uniform with rng: authors"),
    ("authors_rng_independent", at("simulator.rng", "authors"), "simulator.second_subset", "must be same with rng: authors"),
    ("mu_source_lacks_method", at("experiments.figure1.methods", ["fedavg", "fedprox", "feddane"]),
     "experiments.figure2.mu_from", "experiment figure1 does not run feddane_authors"),
    ("unknown_top_key", at("colour", "blue"), "colour", "unknown key"),
    ("load", at("datasets.synthetic_iid.load", "disk"), "datasets.synthetic_iid.load", "'disk' is not one of"),
    ("theory_figure_without_theory", at("experiments.theory.theory", False), "experiments.theory.theory",
     "must be true for figure: theory"),
    ("theory_on_an_lstm", both(at("datasets.tweets", {"kind": "sent140", "lr": 0.3, "batch_size": 10, "rounds": 20,
                                                      "fedprox_mu": 0.01}),
                               at("experiments.theory.datasets", ["tweets"])), "experiments.theory.theory",
     "MCLR models only, not tweets"),
    ("cnn_on_features", at("datasets.synthetic_1_1.model", "cnn"), "datasets.synthetic_1_1.model",
     "cnn takes image samples; synthetic_1_1's samples are features"),
    ("unknown_model", at("datasets.synthetic_iid.model", "resnet"), "datasets.synthetic_iid.model",
     "'resnet' is not one of ['char_lstm', 'cnn'"),
    ("fixed_mu_and_mu_from", at("experiments.theory.mu_from", "figure1"), "experiments.theory.mu_from",
     "not with `mu`"),
    ("mu_from_a_fixed_mu_experiment", at("experiments.figure2.mu_from", "theory"), "experiments.figure2.mu_from",
     "'theory' is not another experiment that tunes mu"),
    ("fixed_mu_negative", at("experiments.theory.mu", [1, -1]), "experiments.theory.mu[1]", "less than the minimum"),
    # the first mistakes checked (tests/test_workflow.py held them)
    ("unknown_key", at("simulator.colour", "blue"), "simulator.colour", "unknown key"),
    ("negative_k", at("experiments.figure1.clients_per_round", -3), "experiments.figure1.clients_per_round",
     "-3 is less than the minimum of 1"),
    ("bad_method", at("experiments.figure1.methods", ["fedavg", "fedsgd"]), "experiments.figure1.methods[1]",
     "unknown method 'fedsgd'; choose one of"),
    ("unknown_dataset", append("experiments.figure1.datasets", "synthetic_2_2"), "experiments.figure1.datasets[4]",
     "unknown dataset 'synthetic_2_2'"),
    ("too_many_clients", at("experiments.figure1.clients_per_round", [10, 31]), "experiments.figure1.clients_per_round",
     "31 is more than the 30 devices"),
    ("missing_key", drop("datasets.synthetic_0_0.lr"), "datasets.synthetic_0_0.lr", "required key is missing"),
    ("number_as_text", at("tuning.fraction", "1e-1"), "tuning.fraction", "is not of type 'number'"),
    ("both_k_keys", at("experiments.figure3.clients_per_round", 30), "experiments.figure3.clients_fraction",
     "one of clients_per_round, clients_fraction"),
    ("no_k_key", drop("experiments.figure1.clients_per_round"), "experiments.figure1.clients_per_round",
     "one of clients_per_round, clients_fraction"),
    ("bad_fraction", at("experiments.figure3.clients_fraction", {"default": 1.5}),
     "experiments.figure3.clients_fraction.default", "1.5 is greater than the maximum of 1"),
    ("no_fraction", at("experiments.figure3.clients_fraction", {"femnist": 0.5}), "experiments.figure3.clients_fraction",
     "no fraction for synthetic_iid"),
    ("unknown_mu_source", at("experiments.figure2.mu_from", "figure9"), "experiments.figure2.mu_from",
     "'figure9' is not another experiment"),
    ("ambiguous_mu_source", at("experiments.figure1.clients_per_round", [5, 10]), "experiments.figure2.mu_from",
     "tunes several K or E"),
    ("reserved_name", rename("experiments.figure3", "tuning"), "experiments.tuning", "reserved name"),
    ("bad_x_axis", at("figures", {"x_axis": "seconds"}), "figures.x_axis", "'seconds' is not one of"),
    ("md5_as_sha256", at("sources.glove.sha256", "056ea991adb4740ac6bf1b6d9b50408b"), "sources.glove.sha256",
     "does not match '^[0-9a-fA-F]{64}$'"),
    ("leaf_without_source", both(drop("sources.sent140"),
                                 at("datasets.tweets", {"kind": "sent140", "lr": 0.3, "batch_size": 10, "rounds": 800,
                                                        "fedprox_mu": 0.01}),
                                 append("experiments.figure1.datasets", "tweets")),
     "sources.sent140", "required by dataset tweets (kind sent140)"),
]


# One case for each place a mistake is found, through a real Snakemake process as well.
THROUGH_SNAKEMAKE = [
    "rounds_2.0",              # the schema (with integers that are ints only)
    "mu_source_lacks_method",  # the checks after the schema (cross-references)
    "results_here",            # results_dir against Snakemake's working directory and the workflow folder
    "dup_experiment",          # a duplicate key: the file named as Snakemake lists its config files
]


def write_case(workdir, edit):
    """The default config with `edit` made, as `workdir`'s config/config.yaml."""
    if getattr(edit, "on_text", False):
        (workdir / "config").mkdir(parents=True, exist_ok=True)
        (workdir / "config" / "config.yaml").write_text(edit((REPO / "config" / "config.yaml").read_text()))
    else:
        cfg = default_config()
        edit(cfg)
        write_config(workdir, cfg)


def assert_one_line(line, key_path, problem):
    assert line is not None and "\n" not in line, line
    assert line.startswith(f"Config error at {key_path}: "), line
    assert problem in line, line


def test_the_default_config_passes_the_check(tmp_path):
    write_config(tmp_path, default_config())
    assert config_error(tmp_path) is None


@pytest.mark.parametrize("edit, key_path, problem", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_config_is_one_line(tmp_path, edit, key_path, problem):
    write_case(tmp_path, edit)
    assert_one_line(config_error(tmp_path), key_path, problem)


@pytest.mark.workflow
@pytest.mark.parametrize("edit, key_path, problem", [c[1:] for c in CASES if c[0] in THROUGH_SNAKEMAKE],
                         ids=THROUGH_SNAKEMAKE)
def test_malformed_config_is_one_line_before_any_job(tmp_path, edit, key_path, problem):
    workdir = copy_workflow(tmp_path / "wf")
    write_case(workdir, edit)
    code, out = snakemake(workdir, "--cores", "1")
    assert code != 0, out
    errors = [line for line in out.splitlines() if "Config error" in line]
    assert len(errors) == 1, out
    assert_one_line(errors[0], key_path, problem)
    assert not (workdir / "results").exists() and not (workdir / "logs").exists()


YAML_BREAKS = [
    (lambda t: t + "seeds: [0\n", "expected ',' or ']'"),
    (lambda t: t.replace("seeds: [0, 1]", "seeds:\n\t- 0"), "'\\t' that cannot start any token"),
]


@pytest.mark.parametrize("broken, problem", YAML_BREAKS, ids=["unclosed_list", "tab"])
def test_yaml_syntax_error_names_the_file_and_line(tmp_path, broken, problem):
    """The workflow's own config file is checked before Snakemake reads it (a --configfile is
    read by Snakemake first: its message names neither file nor line; README says so)."""
    write_case(tmp_path, text(broken))
    line = config_error(tmp_path)
    assert line.startswith("Config error in config/config.yaml, line ") and problem in line, line
    assert "\n" not in line


@pytest.mark.workflow
def test_yaml_syntax_error_stops_snakemake_before_any_job(tmp_path):
    broken, problem = YAML_BREAKS[0]
    workdir = copy_workflow(tmp_path / "wf")
    write_case(workdir, text(broken))
    code, out = snakemake(workdir, "--cores", "1")
    errors = [line for line in out.splitlines() if "Config error" in line]
    assert code != 0 and len(errors) == 1, out
    assert errors[0].startswith("Config error in config/config.yaml, line ") and problem in errors[0], errors[0]
    assert not (workdir / "results").exists()


@pytest.mark.workflow
def test_snakemake_from_another_folder_is_one_line(tmp_path):
    """The configs' paths are relative to the workflow's folder: `snakemake -s path/to/Snakefile` from
    elsewhere says where to run it, before it reads any config or writes anything."""
    workdir = copy_workflow(tmp_path / "wf")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out = snakemake(elsewhere, "-n", "-s", str(workdir / "Snakefile"), "--cores", "1")
    refusals = [line for line in out.splitlines() if line.startswith("Run snakemake in the workflow's folder")]
    assert code != 0 and refusals == [f"Run snakemake in the workflow's folder: cd {workdir.resolve()} (its configs' "
                                      f"paths are relative to it; this one is {elsewhere.resolve()})"], out
    assert list(elsewhere.iterdir()) == [] and not (workdir / "results").exists()


@pytest.mark.workflow
def test_a_target_after_configfile_is_one_line(tmp_path):
    """`snakemake --configfile my.yaml TARGET`: the flag takes TARGET as a second config file. Where
    Snakemake can read it (a run.json), the workflow says so in one line, not as a config's unknown
    keys; `--configfile=my.yaml TARGET` keeps TARGET a target. (A target Snakemake cannot read, an
    image or a missing file, stops Snakemake before the workflow runs: docs/workflow.md.)"""
    workdir = copy_workflow(tmp_path / "wf")
    (workdir / "my.yaml").write_text("results_dir: mine\n")
    target = Path("mine", "x", "run.json")
    (workdir / target).parent.mkdir(parents=True)
    (workdir / target).write_text('{"config": {"rounds": 3}, "seconds": 1.5}\n')
    code, out = snakemake(workdir, "-n", "--cores", "1", "--configfile", "my.yaml", str(target))
    lines = [line for line in out.splitlines() if "config" in line.lower() and "extended by" not in line]
    assert code != 0 and lines == [f"{target} was read as a config file (it has no config key): --configfile takes "
                                   "every path after it; put targets first (snakemake TARGET --configfile FILE) "
                                   "or write --configfile=FILE"], out
    code, out = snakemake(workdir, "-n", "--cores", "1", "--configfile=my.yaml", str(target))
    assert "was read as a config file" not in out and f"No rule to produce {target}" in out, out


# ---------------------------------------------------------------------------------------
# Method options: every option of every method, just outside and just inside its domain
# ---------------------------------------------------------------------------------------

def near(bound, option, inward):
    """The value next to `bound`, one step (an integer, or one float ulp) above it if `inward` is up."""
    if isinstance(option.default, int):
        return bound + (1 if inward else -1)
    return math.nextafter(bound, math.inf if inward else -math.inf)


def domain_edges(option):
    """(values just outside the option's declared domain, values just inside it)."""
    if option.choices:
        return [f"not_{option.choices[0]}", 1], list(option.choices)
    if isinstance(option.default, bool):
        return ["yes", 1], [True, False]
    outside, inside = [str(option.default)], [option.default]  # a quoted number in a file is text
    if option.above is not None:
        outside += [option.above]
        inside += [near(option.above, option, inward=True)]
    if option.at_least is not None:
        outside += [near(option.at_least, option, inward=False)]
        inside += [option.at_least]
    if option.below is not None:
        outside += [option.below]
        inside += [near(option.below, option, inward=False)]
    if option.at_most is not None:
        outside += [near(option.at_most, option, inward=True)]
        inside += [option.at_most]
    if isinstance(option.default, int):
        outside += [float(option.default)]  # 2.0 where an integer is meant
    return outside, inside


def registry_options():
    from fedsim.methods import REGISTRY

    return [(method.name, name, option) for method in REGISTRY.values() for name, option in method.options.items()]


def test_every_numeric_option_declares_a_bound():
    """A number that may be anything is a domain nobody declared (an exclusive 0 is the usual one)."""
    for method, name, option in registry_options():
        if option.is_number and not option.choices:
            assert {option.above, option.at_least} != {None}, f"{method}.{name} declares no lower bound"


@pytest.mark.parametrize("method, name, option", registry_options(),
                         ids=[f"{m}.{n}" for m, n, _ in registry_options()])
def test_every_method_option_is_checked_against_its_domain_before_any_job(tmp_path, method, name, option):
    outside, inside = domain_edges(option)
    for value in outside:
        write_case(tmp_path, at(f"method_options.{method}", {name: value}))
        assert_one_line(config_error(tmp_path), f"method_options.{method}.{name}",
                        f"bad method option {name}={value!r}: expected {option.domain}")
    for value in inside:
        write_case(tmp_path, at(f"method_options.{method}", {name: value}))
        assert config_error(tmp_path) is None, (name, value)


@pytest.mark.workflow
def test_an_out_of_range_option_on_the_command_line_stops_snakemake_before_any_job(tmp_path):
    """The issue's case: fedopt's beta1 in [0, 1) was checked only when each training job started."""
    workdir = copy_workflow(tmp_path / "wf")
    code, out = snakemake(workdir, "-n", "--cores", "1", "--config", "method_options={fedopt: {beta1: 1.5}}")
    errors = [line for line in out.splitlines() if "Config error" in line]
    assert code != 0 and len(errors) == 1, out
    assert errors[0] == "Config error at method_options.fedopt.beta1: bad method option beta1=1.5: expected a number in [0, 1)"
    assert "Job stats" not in out and not (workdir / "results").exists()


# ---------------------------------------------------------------------------------------
# Text read as numbers only where Snakemake made it text: --config, not a config file
# ---------------------------------------------------------------------------------------

QUOTED_IN_A_FILE = [
    ("experiments.figure1.clients_per_round", "10", "'10' is not one positive integer"),
    ("simulator.warm_start", "yes", "'yes' is not of type 'boolean'"),
    ("method_options.fedopt", {"beta1": "0.5"}, "bad method option beta1='0.5': expected a number in [0, 1)"),
]


@pytest.mark.workflow
@pytest.mark.parametrize("path, value, problem", QUOTED_IN_A_FILE, ids=[c[0] for c in QUOTED_IN_A_FILE])
def test_quoted_numbers_in_a_configfile_are_refused_as_text(tmp_path, path, value, problem):
    workdir = copy_workflow(tmp_path / "wf")
    cfg = default_config()
    at(path, value)(cfg)
    write_config(tmp_path, cfg)  # tmp_path/config/config.yaml, given with --configfile
    code, out = snakemake(workdir, "-n", "--cores", "1", "--configfile", str(tmp_path / CONFIG))
    errors = [line for line in out.splitlines() if "Config error" in line]
    assert code != 0 and len(errors) == 1, out
    key = path if isinstance(value, str) else f"{path}.{next(iter(value))}"
    assert_one_line(errors[0], key, problem)


@pytest.mark.workflow
def test_the_same_values_on_the_command_line_are_typed_beside_a_configfile(tmp_path):
    """--config's nested values are text from Snakemake's parser: read as YAML again, even where a
    --configfile is given as well (its own values are left as the file has them)."""
    workdir = copy_workflow(tmp_path / "wf")
    write_config(tmp_path, default_config())
    code, out = snakemake(workdir, "-n", "--printshellcmds", "--cores", "1", "--configfile", str(tmp_path / CONFIG),
                          "--config", "experiments={figure1: {clients_per_round: 5}}", "simulator={warm_start: no}",
                          "method_options={fedopt: {beta1: 0.5}}")
    assert code == 0, out
    assert "fedavg/mu0_K5_E20_seed0/run.json" in out
