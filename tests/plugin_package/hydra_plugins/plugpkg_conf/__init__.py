"""Hydra's own way for a package to add config files: its search path gains plugpkg/conf."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class PlugpkgSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="plugpkg", path="pkg://plugpkg.conf")
