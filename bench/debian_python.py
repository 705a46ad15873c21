"""Makes the benchmark scripts work whatever `python3` is first on PATH.

The scripts need Debian's python3-zmq, python3-msgpack and python3-matplotlib
(installed by .ci/install-deps). A pyenv or venv interpreter lacks them: then
`require()` re-executes the script under /usr/bin/python3, or, where that has
them missing too, stops with the package to install.
"""
import importlib
import os
import sys

DEBIAN = "/usr/bin/python3"
PACKAGES = {"zmq": "python3-zmq", "msgpack": "python3-msgpack", "matplotlib": "python3-matplotlib"}


def require(*modules):
    missing = []
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError:
            missing.append(m)
    if not missing:
        return
    if os.path.exists(DEBIAN) and os.path.realpath(sys.executable) != os.path.realpath(DEBIAN):
        os.execv(DEBIAN, [DEBIAN] + sys.argv)
    sys.exit("%s: missing Python module(s) %s under %s; install %s (bash .ci/install-deps)"
             % (os.path.basename(sys.argv[0]), ", ".join(missing), sys.executable,
                " ".join(PACKAGES.get(m, "python3-" + m) for m in missing)))
