#!/bin/sh
# Run calibration sweep files in order, each timed (sweeps/calibration/RULE.md), e.g.
#   nohup sh sweeps/calibration/run.sh stage1 stage2 > runs/calibration.log 2>&1 &
set -e
for stage in "$@"; do
  for f in sweeps/calibration/${stage}_*.toml; do
    /usr/bin/time -f "$f %e s elapsed, %U s user" python -m testbed sweep "$f" --no-progress
  done
done
