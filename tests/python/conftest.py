"""pytest setup for tests/python: the package from the tree's python/ (unless
PYTHONPATH has another), and the "N passed, N failed" line that
tests/run-tests counts."""
import os
import sys

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python"))


def pytest_terminal_summary(terminalreporter):
    s = terminalreporter.stats
    terminalreporter.write_line("%d passed, %d failed" % (
        len(s.get("passed", [])), len(s.get("failed", [])) + len(s.get("error", []))))
