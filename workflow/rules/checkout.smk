# A workflow runs its own code: this checkout's src/ (where it has one) first on Snakemake's path,
# before any fedsim import, and on its jobs' PYTHONPATH, whatever fedsim another checkout installed.

import os
import sys
from pathlib import Path

if Path(workflow.basedir, "src", "fedsim").is_dir():
    _src = str(Path(workflow.basedir, "src"))
    sys.path.insert(0, _src)
    os.environ.update(PYTHONPATH=os.pathsep.join(filter(None, [_src, os.environ.get("PYTHONPATH")])))
