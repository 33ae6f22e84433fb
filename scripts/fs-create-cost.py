#!/usr/bin/env python3
"""Measures what creating a build's object files costs on a file system.

Usage: scripts/fs-create-cost.py PROJECT [ROUNDS]

PROJECT is a directory with a compile_commands.json (a generated one:
go run ./internal/testutil/cproject/gen DIR). Each round removes PROJECT/build,
then creates every object file the database names (2 KiB each, directories
made as needed), as a compile or gantry batch's download would, and prints the
CPU (user and system) this process spent on the creations, per file.

Why: on ext4 without a journal, creating a file skips, one by one, the free
inodes deleted in the last 1-6 minutes, so a benchmark that removes and
rebuilds a tree again and again pays more for each creation, and so does the
client's CPU per job (scripts/bench-client.sh, docs/PERFORMANCE-HISTORY.md,
"the client's CPU and the filesystem"). Compare a directory there against a
journaled ext4 or a tmpfs.
"""
import json
import os
import resource
import shutil
import sys


def outputs(project):
    with open(os.path.join(project, "compile_commands.json")) as f:
        entries = json.load(f)
    outs = []
    for e in entries:
        args = e.get("arguments") or e["command"].split()
        out = e.get("output") or args[args.index("-o") + 1]
        outs.append(os.path.join(project, out))
    return outs


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: fs-create-cost.py PROJECT [ROUNDS]")
    project = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) == 3 else 8
    outs = outputs(project)
    data = b"x" * 2048
    costs = []
    for _ in range(rounds):
        shutil.rmtree(os.path.join(project, "build"), ignore_errors=True)
        os.sync()
        before = resource.getrusage(resource.RUSAGE_SELF)
        for o in outs:
            os.makedirs(os.path.dirname(o), exist_ok=True)
            fd = os.open(o, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, data)
            os.close(fd)
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        costs.append(1000 * cpu / len(outs))
    print("ms of CPU a file, per round (%d files):" % len(outs), " ".join("%.3f" % c for c in costs))


if __name__ == "__main__":
    main()
