"""pytest set-up shared by every test module: hypothesis keeps what it stores (its example database, its
cache of the constants in our code) under tests/.hypothesis (git-ignored) rather than creating
.hypothesis/ at the top of the repository."""
from pathlib import Path

from hypothesis.configuration import set_hypothesis_home_dir

set_hypothesis_home_dir(Path(__file__).parent / ".hypothesis")
