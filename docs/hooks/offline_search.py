"""MkDocs hook: search in the site opened from disk (file://) with no network.

Material's ``offline`` plugin (mkdocs.yml) builds the site for file://: page links end in
``.html`` and the search index is also written as a script, ``search/search_index.js``. A page
opened from disk cannot start the search's web worker, so the plugin adds the ``iframe-worker``
shim, loaded from unpkg.com: that fails without network and would fetch code from it. This hook
ships the shim with the site instead (``iframe-worker-shim.js`` beside it, the npm package's
file with its MIT notice), as ``assets/javascripts/iframe-worker-shim.js``, and makes it the
page's polyfill; the offline plugin then adds no URL of its own (it skips the shim when a
polyfill already names ``iframe-worker``).
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

SHIM = Path(__file__).with_name("iframe-worker-shim.js")
SHIM_URI = "assets/javascripts/iframe-worker-shim.js"


@event_priority(100)  # before the offline plugin's on_config, which would add unpkg's shim
def on_config(config):
    polyfills = config.extra.get("polyfills", [])
    config.extra["polyfills"] = [u for u in polyfills if "iframe-worker" not in str(u)] + [SHIM_URI]
    return config


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, SHIM_URI, abs_src_path=str(SHIM)))
    return files
