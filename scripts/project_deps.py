"""Prints the requirements of pyproject.toml (core dependencies plus the extras named
on the command line), one per line, for `pip install` with build isolation.

    python scripts/project_deps.py test finetune
"""
import sys
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
reqs = list(project["dependencies"])
extras = project.get("optional-dependencies", {})
for name in sys.argv[1:]:
    if name not in extras:
        sys.exit(f"project_deps.py: unknown extra {name!r}; pyproject.toml has {sorted(extras)}")
    reqs += extras[name]
print("\n".join(reqs))
