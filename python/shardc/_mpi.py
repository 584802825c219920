"""The results of an MPI call on every process.

The global API writes a call's results on process 0 only
(lib/shardc_session.h); a Python training loop feeds them back as the next
call's arguments on every process, so each result is broadcast from process
0 after the call, with MPI_Bcast of the MPI the library was linked with
(OpenMPI: MPI_BYTE and MPI_COMM_WORLD are the addresses of ompi_mpi_byte and
ompi_mpi_comm_world).  The session's world has initialized MPI by then, and
between calls its threads are idle (MPI_THREAD_MULTIPLE either way)."""
import ctypes


class Broadcast:
    def __init__(self, lib):
        self._bcast = lib.MPI_Bcast
        self._bcast.restype = ctypes.c_int
        self._bcast.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        self._byte = ctypes.addressof(ctypes.c_char.in_dll(lib, "ompi_mpi_byte"))
        self._world = ctypes.addressof(ctypes.c_char.in_dll(lib, "ompi_mpi_comm_world"))

    def share(self, arrays):
        chunk = 1 << 30                         # MPI counts are ints
        for a in arrays:
            base, n = a.ctypes.data, a.nbytes
            for off in range(0, n, chunk):
                if self._bcast(base + off, min(chunk, n - off), self._byte, 0, self._world) != 0:
                    raise RuntimeError("MPI_Bcast of a result failed")
