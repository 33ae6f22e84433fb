"""crash_action: a genrule that logs each of its executions (see BUILD)."""

# How long each action runs: long enough that a build of //... is still running when
# the test kills the server, short enough that it stays quick on two cores.
ACTION_SECONDS = "0.5"

def crash_action(name, deps = []):
    """A genrule writing NAME.txt: its inputs' contents, then its own name.

    Each execution appends "start NAME PPID" to $GANTRY_CRASH_LOG when it begins and
    "done NAME PPID" when its output is written. PPID is the process that started the
    action's shell: Gantry's worker, which for the worker embedded in `gantry serve` is
    the server process, so the log tells which server ran each execution.

    The build must pass --action_env=GANTRY_CRASH_LOG=/absolute/path (remote actions
    get exactly the environment Bazel sends); without it the action fails.

    Args:
      name: the target name; the output is NAME.txt.
      deps: crash_action targets whose outputs come first in this one's output.
    """
    native.genrule(
        name = name,
        srcs = deps,
        outs = [name + ".txt"],
        cmd = " && ".join([
            'log="$${GANTRY_CRASH_LOG:?build with --action_env=GANTRY_CRASH_LOG=/absolute/path}"',
            'echo "start %s $$PPID" >> "$$log"' % name,
            "sleep " + ACTION_SECONDS,
            ("cat $(SRCS) > $@" if deps else ": > $@"),
            "echo %s >> $@" % name,
            'echo "done %s $$PPID" >> "$$log"' % name,
        ]),
    )
