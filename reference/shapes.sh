# shapes.sh - sourced by the scripts that read reference/shapes.txt (compare.sh,
# readme_table.sh, steps/07_tuned/sweep.sh), from the repository root. SHAPES_TXT names
# another file of the same form (the tests give it one).
# The contenders compare.sh times beside the steps and cuBLAS, by the names its BACKENDS takes:
# torch SDPA's backends, then FlashAttention-4 (readme_table.sh names a run's subset of them).
COMPARE_BACKENDS="flash cudnn efficient math default fa4"
# shapes_of SET: the shapes of one set, one per line, as
#   "batch heads_q heads_kv seqlen_q seqlen_k head_dim causal dtype[ page=N][ lens=A..B]"
#   (the options as shapes.txt's header describes them). A malformed option, or a shape of
#   fewer than eight fields, prints nothing but one line "error: ..." and returns 2.
shapes_of() {
  awk -v set="$1" -v file="${SHAPES_TXT:-reference/shapes.txt}" '
    function pow2(n) { while (n > 1 && n % 2 == 0) n /= 2; return n == 1 }
    function bad(what) {
      printf "error: %s line %d: %s is not allowed (allowed: the eight fields batch to dtype, then at most once each page=N, N a power of two from 16 to 256, and lens=A..B, 1 <= A <= B <= seqlen_k, batch >= 2)\n", file, NR, what > "/dev/stderr"
      failed = 1; exit 2
    }
    $1 != set { next }
    {
      if (NF < 9) bad("\"" $0 "\" (" NF - 1 " fields)")
      split("", seen)
      for (i = 10; i <= NF; i++) {
        opt = $i; name = opt; sub(/=.*/, "", name)
        if (name in seen) bad("option \"" opt "\" (given twice)")
        seen[name] = 1
        if (opt ~ /^page=[0-9]+$/) { n = substr(opt, 6) + 0; if (n >= 16 && n <= 256 && pow2(n)) continue }
        else if (opt ~ /^lens=[0-9]+\.\.[0-9]+$/) {
          split(substr(opt, 6), r, ".")  # A, "", B
          if (r[1] + 0 >= 1 && r[1] + 0 <= r[3] + 0 && r[3] + 0 <= $6 + 0 && $2 + 0 >= 2) continue
        }
        bad("option \"" opt "\"")
      }
      $1 = ""; out[++n_out] = substr($0, 2)
    }
    END { if (failed) exit 2; for (i = 1; i <= n_out; i++) print out[i] }' "${SHAPES_TXT:-reference/shapes.txt}"
}

# shape_flags SHAPE: the harness flags for a shape's options (a line of shapes_of):
#   page=N -> --page-size N; lens=A..B -> --seqlens-k with the batch's key counts, sequence i
#   (0 to batch-1) round(A x (B/A)^(i/(batch-1))) keys, rounded half up. Nothing for a plain shape.
shape_flags() {
  awk '{
    for (i = 9; i <= NF; i++) {
      if ($i ~ /^page=/) printf "%s--page-size %d", (n++ ? " " : ""), substr($i, 6)
      if ($i ~ /^lens=/) {
        split(substr($i, 6), r, "."); a = r[1] + 0; z = r[3] + 0
        printf "%s--seqlens-k ", (n++ ? " " : "")
        for (s = 0; s < $1; s++) {
          len = int(a * exp(log(z / a) * s / ($1 - 1)) + 0.5)
          printf "%s%d", (s ? "," : ""), (len < a ? a : (len > z ? z : len))
        }
      }
    }
    print ""
  }' <<<"$1"
}
