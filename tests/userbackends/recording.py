"""A user's own worker backend written against fedmst.api alone: agents run as processes, and
each start is written down beside the agents' logs, so a test can tell this backend ran them."""

from fedmst.api import ProcessBackend


class Recording(ProcessBackend):
    name = "recording"
    where = "recorded processes"

    def start(self, emu, node, args, *, env, log):  # type: ignore[no-untyped-def]
        with (log.parent / "started-by-recording.txt").open("a") as f:
            f.write(f"{node}\n")
        return super().start(emu, node, args, env=env, log=log)


class NotABackend:
    name = "not-a-backend"
