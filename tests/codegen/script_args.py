"""The options every check script takes, in one place: --shardc (the
compiler under test, build/shardc by default) and --tmp (its scratch
folder, build/NAME by default, emptied before the run), made absolute.  A
script adds its own options between new_parser and parse."""
import argparse
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def new_parser(doc, tmp):
    """A parser with --shardc and --tmp (default build/<tmp>, or tmp itself
    when it is an absolute path), described by doc's first paragraph."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0].strip(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shardc", default=os.path.join(ROOT, "build", "shardc"))
    ap.add_argument("--tmp", default=os.path.join(ROOT, "build", tmp))
    return ap


def parse(ap):
    """The arguments, with --shardc and --tmp absolute and --tmp an empty
    folder."""
    args = ap.parse_args()
    args.shardc, args.tmp = os.path.abspath(args.shardc), os.path.abspath(args.tmp)
    shutil.rmtree(args.tmp, ignore_errors=True)
    os.makedirs(args.tmp)
    return args


def has_mpi(shardc):
    """Whether shardc's build has the MPI backend's library."""
    return os.path.exists(os.path.join(os.path.dirname(shardc), "libshardc_rt_mpi.a"))


def can_run_mpi(shardc):
    """has_mpi, and the launcher ($MPIRUN's first word, else mpirun) is on
    the PATH."""
    return has_mpi(shardc) and shutil.which((os.environ.get("MPIRUN") or "mpirun").split()[0]) is not None
