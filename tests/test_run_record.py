"""A run is one typed record (fedsim.planning.experiments.RunSpec, issue 58 item 2): its folder is written by
one function (experiments.run_path) and read by none, so no module takes a run's folder apart with a regex."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# what decoding a folder's tag took: a pattern of its parts (_T<rounds>, _lr<lr>, a tag's model, '_theory')
TAG_PATTERN = re.compile(r"""r?["'][^"'\n]*(_T\[0-9\]|_T\(|_lr\[|_lr\(|\(\?P<model>|\(_theory\))""")


def sources():
    return [*sorted((REPO / "src").rglob("*.py")), *sorted((REPO / "workflow").rglob("*.smk")), REPO / "Snakefile"]


def test_no_module_decodes_a_run_folder_with_a_regex():
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()}" for path in sources()
             for n, line in enumerate(path.read_text().splitlines(), 1) if TAG_PATTERN.search(line)]
    assert not found, found


def test_the_train_rule_has_one_wildcard():
    """Its outputs, log and benchmark name the run's folder, {run}, and no other wildcard."""
    text = (REPO / "workflow" / "rules" / "train.smk").read_text()
    rule = text[text.index("rule train:"):]
    assert set(re.findall(r"wildcards\.(\w+)", rule)) == {"run"}
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    assert 'def run_dir(run=None, path="{run}")' in common
    assert re.findall(r"\{(\w+)\}", rule.split("shell:")[0]) == ["run", "run"]  # log, benchmark


def test_the_pattern_would_find_the_old_decoder():
    """The check above is not vacuous: the tag grammar the record replaced matches it."""
    old = 'TAG = re.compile(r"(?:_T(?P<rounds>[0-9]+))?(?:_(?P<model>(?!lr[0-9])\\w+?))?(?:_lr(?P<lr>[0-9.]+))?")'
    assert TAG_PATTERN.search(old)
    assert TAG_PATTERN.search('T=rf"(_T[0-9]+)?(_({alternatives(model_specs())}))?(_lr[0-9]+(\\.[0-9]+)?)?",')
    assert TAG_PATTERN.search('return re.sub(r"_lr[0-9.]+$", "", tag)')
