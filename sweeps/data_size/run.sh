#!/bin/sh
# The data-size table's runs, one after another (sweeps/data_size/README.md):
#   nohup sh sweeps/data_size/run.sh > runs/data_size.log 2>&1 &
set -e
for f in sync_fashion sync_mnist stale_fashion stale_mnist; do
  /usr/bin/time -f "$f %e s elapsed, %U s user" python -m testbed sweep sweeps/data_size/$f.toml --no-progress
done
/usr/bin/time -f "ce %e s elapsed, %U s user" python sweeps/data_size/ce.py
