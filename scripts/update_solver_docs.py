"""Rewrite the generated catalogue in docs/solvers.md from the registry (run after adding a solver)."""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from solvers.cli.catalogue import solver_catalogue_markdown  # noqa: E402

START, END = "<!-- catalogue:start -->", "<!-- catalogue:end -->"
path = Path(__file__).resolve().parent.parent / "docs" / "solvers.md"
text = path.read_text()
new = f"{START}\n{solver_catalogue_markdown()}{END}"
path.write_text(re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: new, text, flags=re.S))
print(f"updated {path}")
