#!/usr/bin/python3
"""Plots exl3-bench `model` results (JSON) into one PNG: decode tokens/s against batch size, and the
fraction of the copy-bandwidth roofline each decode row reaches, one line per JSON file (e.g. one
GPU vs two, or two builds). Needs Debian's python3-matplotlib.

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


def main():
    args = parse_args()
    labels = args.labels.split(",") if args.labels else [os.path.basename(p) for p in args.results]
    if len(labels) != len(args.results):
        sys.exit("plot_results: %d labels for %d files" % (len(labels), len(args.results)))
    fig, (rate, roof) = plt.subplots(1, 2, figsize=(11, 4.2))
    for path, label in zip(args.results, labels):
        data = load(path)
        rows = sorted(data["decode"], key=lambda r: r["batch"])
        batches = [r["batch"] for r in rows]
        rate.plot(batches, [r["tokens_per_s"] for r in rows], marker="o", label=label)
        roof.plot(batches, [100.0 * r["copy_fraction"] for r in rows], marker="o", label=label)
    device = load(args.results[0])["environment"].get("device", {})
    name = device.get("name", "") if isinstance(device, dict) else str(device)
    rate.set(xscale="log", yscale="log", xlabel="batch (sequences)", ylabel="decode tokens/s",
             title="Decode throughput %s" % name)
    roof.set(xscale="log", xlabel="batch (sequences)", ylabel="% of copy bandwidth",
             title="Bytes read per step / step time")
    for ax in (rate, roof):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("plot_results: wrote %s" % args.out)


if __name__ == "__main__":
    main()
