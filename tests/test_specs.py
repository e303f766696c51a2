"""What the planning knows of models and data kinds without torch (fedsim.specs, fedsim.planning.kinds): read from the model
files' text, it is what the imported models declare, and a declaration it cannot read is one error
naming the file."""

import subprocess
import sys
from pathlib import Path

import pytest

from fedsim import models
from fedsim.kinds import KINDS
from fedsim.specs import ModelSpec, model_specs

SRC = Path(__file__).resolve().parents[1] / "src"


def test_the_declarations_read_without_torch_are_the_models_own():
    specs = model_specs()
    assert set(specs) == set(models.REGISTRY)
    for name, model in models.REGISTRY.items():
        assert specs[name] == model.spec
        assert (model.name, model.label, model.linear_softmax) == (name, specs[name].label, specs[name].linear_softmax)


def test_reading_the_declarations_loads_no_torch():
    code = ("import sys; from fedsim.specs import model_specs; model_specs(); "
            "assert 'torch' not in sys.modules, 'torch loaded'")
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(SRC)})


def test_every_kinds_default_model_takes_its_samples():
    specs = model_specs()
    for kind in KINDS.values():
        if kind.default_model is not None:
            assert specs[kind.default_model].takes(kind.samples), kind.name


MODEL_FILE = '''
import torch
from ..specs import ModelSpec

SPEC = {spec}
'''


@pytest.mark.parametrize("spec, problem", [
    ('ModelSpec(name="mine", label="Mine", samples=("image",), sample_seconds=0.001)', None),
    ('ModelSpec(name="other", label="Mine", samples=("image",), sample_seconds=0.001)',
     "declares a model named 'other': name it 'mine'"),
    ('ModelSpec(name="mine", label="Mine", samples=("image",), sample_seconds=SECONDS)',
     "SPEC's arguments must be literals"),
    ('dict(name="mine")', "SPEC must be ModelSpec(name=..., ...) with keyword arguments"),
    ('ModelSpec(name="mine", label="Mine", samples=("image",))', "model mine: declare its sample_seconds"),
])
def test_a_model_files_declaration_is_read_or_refused_naming_the_file(tmp_path, spec, problem):
    (tmp_path / "mine.py").write_text(MODEL_FILE.format(spec=spec))
    (tmp_path / "_shared.py").write_text("import torch\n")  # shared parts declare nothing
    if problem is None:
        assert model_specs(tmp_path) == {"mine": ModelSpec(name="mine", label="Mine", samples=("image",),
                                                            sample_seconds=0.001)}
        return
    with pytest.raises(ValueError, match="mine.py|model mine") as caught:
        model_specs(tmp_path)
    assert problem in str(caught.value)


def test_a_model_file_without_a_declaration_is_named(tmp_path):
    (tmp_path / "mine.py").write_text("import torch\n")
    with pytest.raises(ValueError, match=r"mine.py: a model file declares its SPEC = ModelSpec\(...\)"):
        model_specs(tmp_path)

