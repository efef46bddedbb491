#!/usr/bin/env python3
"""Where a decode step's GPU time goes, from Nsight Compute's CSV of every kernel's duration.

Usage: ncu_step_breakdown.py NCU.csv [STEPS]
NCU.csv is the stdout of `ncu --clock-control none --metrics gpu__time_duration.sum --csv ...
exl3-bench model ... --batch 1 --step-graphs off` (the run's own lines are skipped). A step is
the launches after one sample_kernel (the sampler's last launch) up to and including the next;
the last STEPS (default 3) full steps are summed by kernel name (nested template brackets
dropped) and printed per step, largest first.
"""
import csv, re, sys, collections

def rows(path):
    with open(path, newline='') as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get('Metric Name') != 'gpu__time_duration.sum':
            continue
        v = float(r['Metric Value'].replace(',', ''))
        unit = r['Metric Unit']
        us = v / 1000.0 if unit.startswith('n') else v * 1000.0 if unit.startswith('m') else v
        yield r['Kernel Name'], us

def short(name):
    for junk in ('(anonymous namespace)::', '<unnamed>::', 'unnamed>::', 'void '):
        name = name.replace(junk, '')
    name = re.sub(r'\(.*$', '', name)
    depth, out = 0, ''
    for c in name:
        if c == '<':
            depth += 1
            out += '<' if depth == 1 else ''
        elif c == '>':
            depth -= 1
            out += '>' if depth == 0 else ''
        else:
            out += c
    return out

def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    path, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    ks = list(rows(path))
    ends = [i for i, (n, _) in enumerate(ks) if re.search(r'(^|::|\s)sample_kernel\b', n)]
    if len(ends) < steps + 1:
        sys.exit(f'{len(ends)} sampler launches, need {steps + 1}')
    counts = [b - a for a, b in zip(ends[-steps - 1:-1], ends[-steps:])]
    if len(set(counts)) > 1:
        sys.exit(f'the last {steps} steps have {counts} launches: not all decode steps of one batch '
                 '(a prefill among them?); profile more launches')
    per = collections.defaultdict(lambda: [0, 0.0])
    total = 0.0
    for a, b in zip(ends[-steps - 1:-1], ends[-steps:]):
        for n, us in ks[a + 1:b + 1]:
            entry = per[short(n)]
            entry[0] += 1
            entry[1] += us
            total += us
    print(f'{len(ks)} kernels; {steps} decode steps, {total / steps:.1f} us a step (kernel time only)')
    for n, (c, us) in sorted(per.items(), key=lambda x: -x[1][1]):
        print(f'{us / steps:9.1f} us {100 * us / total:5.1f}%  {c // steps:4d} launches  {us / c:7.2f} us each  {n}')

main()
