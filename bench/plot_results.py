#!/usr/bin/python3
"""Plots exl3-bench `model` results (JSON) into one PNG: decode tokens/s against batch size, and the
fraction of the copy-bandwidth roofline each decode row reaches, one line per JSON file (e.g. one
GPU vs two, or two builds). When the files include a one-rank run and runs over several ranks
(`exl3-bench model --ranks N`), a third panel shows the tensor-parallel scaling: each multi-rank
run's decode tokens/s over the one-rank run's at the same batch, its prefill ratio in the legend.
Needs Debian's python3-matplotlib.

    bench/plot_results.py OUT.png RESULT.json [RESULT.json ...] [--labels A,B,...]
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="PNG to write")
    p.add_argument("results", nargs="+", help="exl3-bench model --json files")
    p.add_argument("--labels", help="comma-separated legend labels, one per file (default: file names)")
    return p.parse_args()


def load(path):
    with open(path) as f:
        data = json.load(f)
    if "decode" not in data or not data["decode"]:
        raise ValueError("%s has no decode rows (is it an `exl3-bench model` result?)" % path)
    return data


def ranks_of(data):
    return int(data.get("environment", {}).get("ranks", 1))


def prefill_ratio(run, base):
    """Largest prompt length both runs measured, and run's prefill tokens/s over base's there."""
    base_rates = {r["tokens"]: r["tokens_per_s"] for r in base.get("prefill", [])}
    common = [r for r in run.get("prefill", []) if r["tokens"] in base_rates and base_rates[r["tokens"]] > 0]
    if not common:
        return None
    row = max(common, key=lambda r: r["tokens"])
    return row["tokens"], row["tokens_per_s"] / base_rates[row["tokens"]]


def plot_scaling(ax, runs):
    """Decode tokens/s of each multi-rank run over the first one-rank run's, per batch."""
    base = next(data for _, data in runs if ranks_of(data) == 1)
    base_rates = {r["batch"]: r["tokens_per_s"] for r in base["decode"]}
    most = 1
    for index, (label, data) in enumerate(runs):
        ranks = ranks_of(data)
        if ranks == 1:
            continue
        most = max(most, ranks)
        rows = sorted((r for r in data["decode"] if base_rates.get(r["batch"], 0) > 0), key=lambda r: r["batch"])
        text = "%s (%d ranks" % (label, ranks)
        ratio = prefill_ratio(data, base)
        if ratio:
            text += ", prefill %d: %.2fx" % ratio
        ax.plot([r["batch"] for r in rows], [r["tokens_per_s"] / base_rates[r["batch"]] for r in rows], marker="o",
                color="C%d" % index, label=text + ")")
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.axhline(most, color="gray", linewidth=0.8, linestyle="--")
    ax.set(xscale="log", xlabel="batch (sequences)", ylabel="decode tokens/s / one rank's",
           title="Tensor-parallel scaling")


def main():
    args = parse_args()
    labels = args.labels.split(",") if args.labels else [os.path.basename(p) for p in args.results]
    if len(labels) != len(args.results):
        sys.exit("plot_results: %d labels for %d files" % (len(labels), len(args.results)))
    runs = [(label, load(path)) for path, label in zip(args.results, labels)]
    scaling = any(ranks_of(d) == 1 for _, d in runs) and any(ranks_of(d) > 1 for _, d in runs)
    fig, axes = plt.subplots(1, 3 if scaling else 2, figsize=(16.5 if scaling else 11, 4.2))
    rate, roof = axes[0], axes[1]
    for index, (label, data) in enumerate(runs):
        rows = sorted(data["decode"], key=lambda r: r["batch"])
        batches = [r["batch"] for r in rows]
        color = "C%d" % index  # the same run has the same colour in every panel
        rate.plot(batches, [r["tokens_per_s"] for r in rows], marker="o", color=color, label=label)
        roof.plot(batches, [100.0 * r["copy_fraction"] for r in rows], marker="o", color=color, label=label)
    device = load(args.results[0])["environment"].get("device", {})
    name = device.get("name", "") if isinstance(device, dict) else str(device)
    rate.set(xscale="log", yscale="log", xlabel="batch (sequences)", ylabel="decode tokens/s",
             title="Decode throughput %s" % name)
    roof.set(xscale="log", xlabel="batch (sequences)", ylabel="% of copy bandwidth",
             title="Bytes read per step / step time")
    if scaling:
        plot_scaling(axes[2], runs)
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("plot_results: wrote %s" % args.out)


if __name__ == "__main__":
    main()
