"""Decode backends: each module registers a `Decoder` factory in `decode.api.DECODERS`. Every module here
is imported when the registry is first needed, so a new backend is one module (importing only torch at
module level: config validation reads the registry before any model code loads) and one
`conf/engine/<name>.yaml`."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
