# The code each job runs, as one input per job (fedsim.planning.jobs): helpers for the rules' `code` inputs.

# ---------------------------------------------------------------------------------------
# Package code the jobs depend on: ONE fingerprint file per set of entry modules,
# <results_dir>/code/<entries joined by +>.txt, listing each source file the job runs with the
# sha256 of its content (fedsim.planning.jobs.code_fingerprint). It is rewritten only when that text
# changes, so an edit reruns the jobs whose code changed, a mere mtime change (checkout) does
# not, and the scheduler stats one file per job instead of every source file. Written while
# parsing, not by a rule: a rule's job, even rewriting the same text, would rerun every job after it.
# ---------------------------------------------------------------------------------------


@cache
def _fingerprint(*entries):
    return tuple(jobs.code_fingerprint(Path(workflow.basedir, "src", "fedsim"), code_dir(), *entries))


def code_fingerprint(*entries):
    """A rule's `code` input: the fingerprint of the code that runs the modules `entries` (one
    path, or none where this checkout has no src/), computed and written once per entry set and
    process (the imports walked once per method, not once per job)."""
    return list(_fingerprint(*entries))


@cache
def _method_fingerprint(method):
    return tuple(jobs.method_fingerprint(Path(workflow.basedir, "src", "fedsim"), code_dir(), method))


def train_code(method):
    """Code of one method's training runs: train.py's imports and the method's own module with
    those it builds on (fedsim.methods.USES), or a plugin method's file (fedsim.planning.jobs.method_fingerprint);
    another method's file is not among them."""
    return list(_method_fingerprint(ENTRIES[method].method.name))


@cache
def _model_fingerprint(model):
    return tuple(jobs.model_fingerprint(Path(workflow.basedir, "src", "fedsim"), code_dir(), model))


def model_code(dataset):
    """Code of the model a dataset's runs train (fedsim.planning.jobs.model_fingerprint): an edit of
    a model's file, fedsim's or a plugin's, reruns that model's runs and no other."""
    return list(_model_fingerprint(kinds.entry_model(config, dataset)))


@cache
def _kind_fingerprint(kind):
    return tuple(jobs.kind_fingerprint(Path(workflow.basedir, "src", "fedsim"), code_dir(), kind))


def kind_code(dataset):
    """Code of a dataset's build: its kind's module and what it imports, or a plugin kind's file
    (fedsim.planning.jobs.kind_fingerprint): an edit of a kind rebuilds that kind's datasets."""
    return list(_kind_fingerprint(dataset_cfg(dataset)["kind"]))


for _method in METHODS:  # every fingerprint now, before the DAG looks at any file
    train_code(_method)
for _dataset in used_datasets():
    model_code(_dataset)
    kind_code(_dataset)
