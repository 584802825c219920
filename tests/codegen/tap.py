"""TAP-like output for the codegen check scripts: "ok N - ...", "not ok N -
...: detail", then "N passed, N failed"."""
import sys


class Tap:
    def __init__(self):
        self.n, self.failed = 0, 0

    def check(self, ok, what, detail=""):
        self.n += 1
        self.failed += 0 if ok else 1
        print("%s %d - %s%s" % ("ok" if ok else "not ok", self.n, what, "" if ok or not detail else ": " + detail))
        sys.stdout.flush()
        return ok

    def summary(self):
        print("%d passed, %d failed" % (self.n - self.failed, self.failed))
        return 1 if self.failed else 0
