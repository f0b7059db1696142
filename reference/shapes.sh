# shapes.sh - sourced by the scripts that read reference/shapes.txt (compare.sh,
# readme_table.sh, steps/07_tuned/sweep.sh), from the repository root.
# shapes_of SET: the shapes of one set, one per line, as
#   "batch heads_q heads_kv seqlen_q seqlen_k head_dim causal dtype".
shapes_of() { awk -v set="$1" '$1 == set { $1 = ""; print substr($0, 2) }' reference/shapes.txt; }
