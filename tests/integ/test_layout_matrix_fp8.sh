#!/usr/bin/env bash
# The fp8 engine layouts of DeepSeek-V3 and Kimi-K2 (layout_matrix_fp8.txt),
# checked as test_layout_matrix.sh checks the others (a file of their own:
# the ASan build's time limit per test).
exec bash "$(dirname "$0")/test_layout_matrix.sh" "$1" "$2" layout_matrix_fp8.txt 8
