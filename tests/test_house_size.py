"""The house stays small: no module of the package over 600 lines (the brief's limit; split by concern, not by
count), so a reader opens files of a size one reads top to bottom."""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rl_lightning"
MAX_LINES = 600


def test_no_module_of_the_package_is_over_600_lines():
    sizes = {
        path.relative_to(PACKAGE.parent).as_posix(): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert len(sizes) > 50  # the package was found
    over = {path: lines for path, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split them by concern): {over}"
