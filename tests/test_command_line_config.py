"""`--config` values typed as a config file types them: Snakemake reads a nested value on its command
line as text throughout ('20'), so `--config 'experiments={figure1: {rounds: 20}}'` was refused with
"'20' is not of type 'integer'" (fedsim.planning.configcheck.command_line_types)."""

import yaml

from fedsim.planning.configcheck import command_line_types, configfiles_after_the_first


def snakemake_reads(text):
    """What Snakemake's --config makes of a nested value: YAML with every scalar kept as text."""
    return yaml.load(text, Loader=yaml.loader.BaseLoader)


def test_nested_values_get_the_types_a_config_file_gives():
    given = snakemake_reads("{figure1: {rounds: 20, epochs: 1, theory: true, fraction: 0.25, methods: [fedavg]}}")
    assert given["figure1"]["rounds"] == "20"  # the bug: text where a file has a number
    typed = command_line_types(given)
    assert typed == yaml.safe_load("{figure1: {rounds: 20, epochs: 1, theory: true, fraction: 0.25, methods: [fedavg]}}")
    assert type(typed["figure1"]["rounds"]) is int and type(typed["figure1"]["fraction"]) is float


def test_lists_and_text_stay_as_a_file_would_read_them():
    assert command_line_types(snakemake_reads("[0, 1]")) == [0, 1]
    assert command_line_types(snakemake_reads("[synthetic_iid, femnist]")) == ["synthetic_iid", "femnist"]
    assert command_line_types({"results_dir": "results/x", "mu": 0.5, "seeds": ["0"]}) == {
        "results_dir": "results/x", "mu": 0.5, "seeds": [0]}
    # YAML 1.1 reads 1e-3 as text in a file too: the schema's error then says how to write it
    assert command_line_types(snakemake_reads("{lr: 1e-3}")) == {"lr": "1e-3"}
    assert command_line_types(snakemake_reads("{name: '{bad'}")) == {"name": "{bad"}


def test_the_paths_a_configfile_flag_takes_after_its_first():
    """Where a target written after `--configfile FILE` lands (workflow/rules/common.smk says so)."""
    assert configfiles_after_the_first(["snakemake", "--cores", "2", "--configfile", "my.yaml", "out/a.png"]) == [
        "out/a.png"]
    assert configfiles_after_the_first(["snakemake", "--configfile=my.yaml", "out/a.png"]) == []
    assert configfiles_after_the_first(["snakemake", "--configfile", "a.yaml", "-n", "out/a.png"]) == []
    assert configfiles_after_the_first(["snakemake", "--configfiles", "a.yaml", "b.yaml", "c.json", "--cores", "1",
                                        "--configfile", "d.yaml", "e"]) == ["b.yaml", "c.json", "e"]
    assert configfiles_after_the_first(["snakemake", "out/a.png", "--configfile", "my.yaml"]) == []
