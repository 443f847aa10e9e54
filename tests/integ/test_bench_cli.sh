#!/usr/bin/env bash
# ferry bench xport runs end to end between two processes (a smoke test: the
# figures are for docs/benchmarks.md, not asserted here), and refuses bad input.
set -u
ferry=$1
source "$(dirname "$0")/expect.sh"
expect 0 "get/memcpy" -- bench xport --size 4M --repeat 2
expect 0 "runs/s" -- bench xport --size 4M --repeat 2 --threads 2
expect 0 "user-registered" -- bench xport --size 4M --repeat 2 --memory user
expect 0 "get/TCP" -- bench xport --backend ucx --tls tcp --size 4M --repeat 2
expect 0 "get/memcpy" -- bench xport --backend ucx --tls sm,self --size 4M --repeat 2
expect 2 "backend is shm or ucx" -- bench xport --backend rdma
expect 2 "--tls applies to --backend ucx" -- bench xport --tls tcp
expect 2 "--size takes sizes like 64M,1G" -- bench xport --size lots
expect 2 "--memory is alloc or user" -- bench xport --memory gpu
expect 2 "unknown benchmark" -- bench disk
expect_done
