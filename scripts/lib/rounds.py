"""Reads what the scripts built on run_rounds (rounds.sh) record.

Each line of a results file is "ROUND NAME key=value ...": one run of one
variant in one round.
"""
import collections
import statistics


def load(path):
    """Returns {name: {round: {key: value}}}, in the order names first appear."""
    runs = collections.defaultdict(dict)
    with open(path) as f:
        for line in f:
            fields = line.split()
            runs[fields[1]][fields[0]] = dict(x.split("=", 1) for x in fields[2:])
    return runs


def print_pair_ratios(runs, key, label):
    """Prints, for every pair of variants, key's ratio in each round both ran, and the median."""
    names = list(runs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ratios = [float(runs[a][r][key]) / float(runs[b][r][key]) for r in runs[a] if r in runs[b]]
            print(f"{a}/{b} {label} per round {[round(x, 3) for x in ratios]}, median {statistics.median(ratios):.3f}")
