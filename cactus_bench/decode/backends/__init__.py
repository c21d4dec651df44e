"""Decode backends: each module registers a `Backend` in `decode.api.BACKENDS`. Every module here is
imported when the registry is first needed, so a new backend is one module (importing only torch at module
level: config validation reads the registry before any model code loads); installed packages add theirs
through the `cactus_bench.backends` entry points."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
