"""A placement that fails at its first job: what a plugin's mistake looks like on the console."""
from fedmst.api import Placement


class Fails(Placement):
    def place(self, job, view):  # type: ignore[no-untyped-def]
        raise KeyError(job.name)
