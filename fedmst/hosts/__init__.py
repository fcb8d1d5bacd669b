"""One emulation on several hosts: each host's share, built and driven through Ray (issue 47)."""
