"""MkDocs hook: the plots of benchmarks/results/ in the built site.

Pages show a benchmark's plot by its path in the repository, relative to the page (e.g.
``../benchmarks/results/robustness/accuracy.png`` from ``docs/robustness.md``), which works on
GitHub. Those files are outside ``docs_dir``; this hook adds each top-level plot of a results
folder (``benchmarks/results/<name>/*.png``, not the runs' own plots below it) as a site file
under that very source path, copied to ``results/<name>/<file>.png`` in the site, so MkDocs
resolves the links, checks them like any other (``--strict``) and rewrites them to the copy.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files, InclusionLevel


def on_files(files: Files, config) -> Files:
    docs = Path(config["docs_dir"])
    results = docs.parent / "benchmarks" / "results"
    for png in sorted(results.glob("*/*.png")):
        relative = png.relative_to(results).as_posix()
        files.append(
            File(
                f"../benchmarks/results/{relative}",
                src_dir=str(docs),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
                dest_uri=f"results/{relative}",
                inclusion=InclusionLevel.INCLUDED,  # a ``..`` path would match ``.*``
            )
        )
    return files
