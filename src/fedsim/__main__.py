"""`python -m fedsim` and the `fedsim` command: the CLI, and one line where a user's own file
(FEDSIM_PLUGINS) breaks the registries it imports, instead of a traceback through fedsim's imports."""

import sys

from .specs import PluginError


def console(argv=None) -> int:
    try:  # (a command may import a registry the CLI's parser does not: the models' of `train`)
        from .cli import main

        return main(argv)
    except PluginError as err:
        print(f"fedsim: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(console())
