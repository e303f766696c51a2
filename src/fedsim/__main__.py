"""`python -m fedsim` and the `fedsim` command: the CLI, and one line where a user's own file
(FEDSIM_PLUGINS) breaks the registries it imports, instead of a traceback through fedsim's imports."""

import sys

from .specs import PluginError


def console(argv=None) -> int:
    try:
        from .cli import main
    except PluginError as err:
        print(f"fedsim: error: {err}", file=sys.stderr)
        return 2
    return main(argv)


if __name__ == "__main__":
    sys.exit(console())
