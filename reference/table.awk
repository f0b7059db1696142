# reference/table.awk - the comparison tables from a compare CSV (the harness's columns):
#   step | time (ms) | TFLOP/s | vs torch-FA2 | vs default SDPA | % of mma.sync ceiling | % of wgmma ceiling | key change
# (the ceilings: probes mma_sync_m16n8k16 and, on Hopper, wgmma_m64n256k16 of the ceiling CSV)
# one table per shape. A step is held to the ceiling of the instruction it runs, the other
# column left "-": the steps of wgmma_steps (the Makefile's HOPPER_STEPS) to wgmma's, every
# other GPU step to mma.sync's (step 01, which runs neither, to mma.sync's: the rate step 02
# starts to use). The cuBLAS and torch rows run instructions of their own: both columns. A contender measured in several rounds at a shape (make compare's
# rows) gets the median of the rounds' medians; a check that failed in any round is shown.
# A CSV with FlashAttention-4's rows (fa4, fa4_backward: sdpa.py --backends fa4) gives the
# forward's and the backward's tables one more column, "vs FA4", after the torch ratios.
# A decode shape's table has other columns:
#   step | time (ms) | GB/s | % of bandwidth | vs torch-FA2 | vs cuDNN | vs default SDPA | key change
# GB/s counts the bytes of K and V (2 x batch x heads_kv x seqlen_k x head_dim x 2), each
# read once, over the time; the bandwidth is the stream_read probe of the bandwidth CSV.
# Rows of a KV cache (the CSV's page_size and seqlens_k columns, after key_change; CSVs
# written before them end at key_change) are tables of their own, titled as the harness
# prints the shape: "(Nk per sequence: A..B)" (the shortest and the longest sequence) and
# "(K, V in pages of N)". Their GB/s count the keys the sequences hold, 2 x heads_kv x
# head_dim x 2 bytes x the sum over the sequences of min(seqlen_k_b, seqlen_k); paging moves
# no byte. (Q and O are not counted, at any decode shape: under 0.1% of the bytes at every
# one, and the committed tables keep the numbers their pages quote.) A paged table's torch
# ratios are to torch's rows at the same shape's contiguous cache (the same bytes; torch
# SDPA has no paged input), a mixed-length table has none (torch SDPA takes no per-sequence
# key count for a dense batch): each such table says so under its title.
# With backward=1 (make compare SHAPES=backward) the tables are the backward's, from its rows
# alone, each contender under its forward's name:
#   step | time (ms) | TFLOP/s | vs torch-FA2 | vs cuDNN | vs default SDPA | % of mma.sync ceiling | key change
# TFLOP/s count 2.5 forwards (as FA2 and FA3 count a backward); the ratios are to torch's
# backward per backend. A backward row is torch_sdpa_<backend>_backward (sdpa.py --backward),
# or <name>_backward where <name> has a row at the same shape: the harness writes a step's
# forward row and then its backward row (common/main.c). The second rule, not the suffix
# alone, tells step 14's forward row (its name, 14_backward, ends in _backward too) from its
# backward row, 14_backward_backward. Without backward=1 the backward rows are left out.
# The forward rows of a step whose folder name ends in _backward (14_backward,
# 15_wgmma_backward) are left out of every table: such a step teaches the backward, and its
# forward is another step's (step 07's, step 10's), which has a row of its own.
# mode=count_backward prints the number of backward rows and no table (readme_table.sh asks).
#
# awk -v mode=text|markdown -v ceiling_csv=FILE -v shapes="B HQ HKV NQ NK D C DTYPE;..." \
#     [-v sweep="B HQ HKV NQ NK D C DTYPE;..."] [-v decode="...;..." -v bandwidth_csv=FILE] \
#     [-v wgmma_steps="09 10 ..."] [-v backward=1] -f reference/table.awk compare.csv
#   shapes: which shapes, in this order (default: every shape of the CSV, in CSV order);
#   wgmma_steps: the step numbers that run wgmma (default: `make -s hopper-steps`, asked from
#     the current directory, the repository root; if that answers nothing, every row gets
#     both columns);
#   sweep (markdown): one more table, TFLOP/s per step at each of these shapes' seqlen;
#   decode: the shapes that get the decode table.
#   A shape in these lists may end with the options of reference/shapes.txt (page=N,
#   lens=A..B): it names the rows of that KV cache.
# Ratios are speed ratios to torch SDPA in the same CSV (> 1: faster than torch).
# The key change is the CSV's last column (the step's fa2_key_change(), quoted).
# POSIX awk only (mawk, busybox): the table must print where Python is not installed.

BEGIN {
    FS = ","
    if (ceiling_csv != "")
        while ((getline line < ceiling_csv) > 0) {
            split(line, c, ",")
            if (c[5] !~ /^[0-9.]+$/) continue
            if (c[1] == "mma_sync_m16n8k16") ceiling[c[4]] = c[5] + 0  # last row per dtype wins
            if (c[1] == "wgmma_m64n256k16") wgmma_ceiling[c[4]] = c[5] + 0
        }
    if (bandwidth_csv != "")
        while ((getline line < bandwidth_csv) > 0) {
            split(line, c, ",")
            if (c[1] == "stream_read" && c[4] ~ /^[0-9.]+$/) bandwidth = c[4] + 0  # GB/s; the last row wins
        }
    n_decode = split(decode, decode_specs, ";")
    for (i = 1; i <= n_decode; i++)
        if ((key = spec_key(decode_specs[i])) != "") is_decode[key] = 1
    torch_order = "torch_sdpa_flash torch_sdpa_cudnn torch_sdpa_efficient torch_sdpa_math torch_sdpa_default fa4"
    n_torch = split(torch_order, torch_names, " ")
    LABEL_COLS = "-36|step|step;10|time (ms)|time (ms)"
    # The wgmma steps: one list, the Makefile's HOPPER_STEPS.
    if (wgmma_steps == "") {
        cmd = "make -s --no-print-directory hopper-steps 2>/dev/null"
        if ((cmd | getline line) > 0) wgmma_steps = line
        close(cmd)
    }
    n_wgmma = split(wgmma_steps, wgmma_ids, " ")
    for (i = 1; i <= n_wgmma; i++) runs_wgmma[wgmma_ids[i]] = 1
}

FNR == 1 && $1 == "step" { next }
NF >= 19 {
    # a row with the KV cache's columns ends with seqlens_k, one without it with the quoted key change
    kv_cols = NF >= 22 && $NF !~ /"$/ ? 2 : 0
    lens = kv_cols ? $NF : ""
    n_lens = split(lens, len_list, ";")
    lo = hi = ""; keys_held = 0
    for (i = 1; i <= n_lens; i++) {
        len = len_list[i] + 0
        if (lo == "" || len < lo) lo = len
        if (hi == "" || len > hi) hi = len
        keys_held += len < $9 + 0 ? len : $9 + 0
    }
    key = shape_key($5, $6, $7, $8, $9, $10, $11, $4, kv_cols ? $(NF - 1) : 0, n_lens ? lo ".." hi : "")
    kv_keys[key] = n_lens ? keys_held : $5 * $9
    has_row[key, $1] = 1
    is_bwd = $1 ~ /^(torch_sdpa_[a-z]+|fa4)_backward$/ || ($1 ~ /_backward$/ && (key, substr($1, 1, length($1) - 9)) in has_row)
    if ($1 ~ /^fa4(_backward)?$/) has_fa4 = 1  # the tables gain a column "vs FA4"
    n_backward += is_bwd
    # the front table takes both: a backward row under its shape's key marked "B:"
    if (mode == "front") { if (is_bwd) key = "B:" key }
    else if (is_bwd != (backward == 1)) next
    # a _backward step's forward row: its forward is another step's (the header says why)
    if (!is_bwd && $1 ~ /^[0-9][0-9]_/ && $1 ~ /_backward$/) next
    step_name = is_bwd ? substr($1, 1, length($1) - 9) : $1
    if (!(key in seen_shape)) { seen_shape[key] = 1; shape_order[++n_shapes] = key }
    if (!((key, step_name) in n_rounds)) { steps_of[key] = steps_of[key] " " step_name; n_rounds[key, step_name] = 0; status[key, step_name] = "UNCHECKED" }
    device[key, step_name] = $2
    if (NF >= 20 + kv_cols) key_text[step_name] = unquote(20, NF - kv_cols)
    if ($19 == "UNSUPPORTED") { status[key, step_name] = "UNSUPPORTED"; next }
    if (valid($12)) times[key, step_name, ++n_rounds[key, step_name]] = $12 + 0
    # a failed check in any round shows; else the checked round's PASS
    if ($19 == "FAIL" || ($19 == "PASS" && status[key, step_name] != "FAIL")) status[key, step_name] = $19
}

# Fields from `from` to `to`, joined by the commas the split took out, without the CSV quotes.
function unquote(from, to,    i, s) {
    s = $from
    for (i = from + 1; i <= to; i++) s = s "," $i
    gsub(/^"|"$/, "", s)
    gsub(/""/, "\"", s)
    return s
}

# Query-key pairs one head computes, as fa2_visible_pairs: row i sees keys j <= i + seqlen_k - seqlen_q.
function visible_pairs(nq, nk, causal,    shift) {
    if (causal != 1) return nq * nk
    shift = nk - nq
    if (shift >= 0) return nq * (shift + 1) + nq * (nq - 1) / 2
    return nk * (nk + 1) / 2
}

# A dense shape's key, "dtype|b h hkv nq nk d causal"; a KV cache's adds "|page=N" (page > 0)
# and "|lens=A..B" (lens: the shortest and the longest sequence's key count).
function shape_key(b, h, hkv, nq, nk, d, causal, dtype, page, lens) {
    return dtype "|" b " " h " " hkv " " nq " " nk " " d " " causal (page + 0 > 0 ? "|page=" page + 0 : "") \
           (lens != "" ? "|lens=" lens : "")
}

# The key of a shape as shapes.txt writes it, "b h hkv nq nk d causal dtype[ page=N][ lens=A..B]"
# ("" if it has fewer than eight fields).
function spec_key(spec,    f, n, i, page, lens) {
    if ((n = split(spec, f, " ")) < 8) return ""
    page = 0; lens = ""
    for (i = 9; i <= n; i++) {
        if (f[i] ~ /^page=/) page = substr(f[i], 6)
        if (f[i] ~ /^lens=/) lens = substr(f[i], 6)
    }
    return shape_key(f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], page, lens)
}

# The dense shape of a key (its KV cache's parts left out).
function dense_key(key,    parts) { split(key, parts, "|"); return parts[1] "|" parts[2] }

function valid(x) { return x ~ /^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ && x + 0 > 0 }

# The median of the rounds' times of a contender at a shape ("" if it has none).
function median_ms(key, step,    n, i, j, a, tmp) {
    n = n_rounds[key, step]
    if (n == 0) return ""
    for (i = 1; i <= n; i++) a[i] = times[key, step, i]
    for (i = 2; i <= n; i++)
        for (j = i; j > 1 && a[j - 1] > a[j]; j--) { tmp = a[j]; a[j] = a[j - 1]; a[j - 1] = tmp }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}

# GB/s of K and V (each element read once: the keys the sequences hold) from the median time.
function gbps_of(key, step,    f, m) {
    m = median_ms(key, step)
    if (m == "") return ""
    split(key, f, "|"); split(f[2], f, " ")
    return 2 * (key in kv_keys ? kv_keys[key] : f[1] * f[5]) * f[3] * f[6] * 2 / (m * 1e-3) / 1e9
}

function tflops_of(key, step,    f, m) {
    m = median_ms(key, step)
    if (m == "") return ""
    split(key, f, "|"); split(f[2], f, " ")
    # From the time, not the CSV's 2-decimal column: step 00 on the CPU is below 0.01 TFLOP/s.
    # A backward counts 2.5 forwards.
    return (backward == 1 || key ~ /^B:/ ? 2.5 : 1) * 4 * f[1] * f[2] * visible_pairs(f[4], f[5], f[7]) * f[6] / (m * 1e-3) / 1e12
}

# Sort key: the steps in order, then the cuBLAS baseline, then torch's backends, then the rest.
function rank(step,    i) {
    if (step ~ /^[0-9][0-9]_/) return "0 " step
    if (step == "cublas_unfused") return "1"
    for (i = 1; i <= n_torch; i++) if (torch_names[i] == step) return "2 " i
    return "3 " step
}

function fmt_ms(x) { return x == "" ? "-" : (x < 1 ? sprintf("%.4f", x) : (x < 100 ? sprintf("%.3f", x) : sprintf("%.1f", x))) }
function fmt_tflops(x) { return x == "" ? "-" : (x < 1 ? sprintf("%.3f", x) : (x < 100 ? sprintf("%.1f", x) : sprintf("%.0f", x))) }
function fmt_ratio(x, ref) { return x == "" || ref == "" ? "-" : (x / ref < 0.01 ? "<0.01x" : sprintf("%.2fx", x / ref)) }

function title(key,    parts, n, f, dtype, seqlen, kv, i) {
    n = split(key, parts, "|"); dtype = parts[1]
    split(parts[2], f, " ")
    seqlen = f[4] == f[5] ? "N=" f[4] : "Nq=" f[4] ", Nk=" f[5]
    for (i = 3; i <= n; i++) if (parts[i] ~ /^lens=/) kv = kv " (Nk per sequence: " substr(parts[i], 6) ")"
    for (i = 3; i <= n; i++) if (parts[i] ~ /^page=/) kv = kv " (K, V in pages of " substr(parts[i], 6) ")"
    return dtype ", B=" f[1] ", H=" f[2] (f[3] != f[2] ? " (KV " f[3] ")" : "") ", " seqlen ", d=" f[6] ", " \
           (f[7] == 1 ? "causal" : "non-causal") kv
}

# A table's columns: "width|markdown header|text header" entries joined by ";" (the width
# printf's, for the text table), the step's label and time first (LABEL_COLS, set in BEGIN).
# The rounds (text) and the key change follow every table's numbers.
# FA4's column (a CSV with its rows), and a row's cell in it, after the torch ratios.
function fa4_col() { return has_fa4 ? ";8|vs FA4|vs FA4" : "" }
function fa4_cell(rate, fa4) { return has_fa4 ? ";" fmt_ratio(rate, fa4) : "" }

# One contender's row: its label (with its status unless it passed), its median time, the
# table's numbers (cells, joined by ";", one per column after those two), (text: the rounds,)
# and its key change (markdown escapes bars).
function print_row(key, s, cols, cells,    label, kc, c, col, f, n, i, line) {
    label = s (status[key, s] == "PASS" ? "" : " [" status[key, s] "]")
    kc = key_text[s]
    n = split(cells, c, ";")
    split(cols, col, ";")
    if (mode == "markdown") {
        gsub(/\|/, "\\|", kc)
        line = "| " label " | " fmt_ms(median_ms(key, s)) " |"
        for (i = 1; i <= n; i++) line = line " " c[i] " |"
        print line " " kc " |"
    } else {
        split(col[1], f, "|"); line = sprintf("%" f[1] "s", label)
        split(col[2], f, "|"); line = line sprintf(" %" f[1] "s", fmt_ms(median_ms(key, s)))
        for (i = 1; i <= n; i++) { split(col[i + 2], f, "|"); line = line sprintf(" %" f[1] "s", c[i]) }
        print line sprintf(" %7d  %s", n_rounds[key, s], kc)
    }
}

# A shape's title, a note under it if any, and its table's header: the markdown header (its
# rule has one right-aligned column per number between the first and the last) or the text one.
function print_header(key, cols, note,    col, f, n, i, md, rule, text) {
    n = split(cols, col, ";")
    md = "|"; rule = "|---|"
    for (i = 1; i <= n; i++) {
        split(col[i], f, "|")
        md = md " " f[2] " |"
        if (i > 1) rule = rule "---:|"
        text = text (i > 1 ? " " : "") sprintf("%" f[1] "s", f[3])
    }
    if (mode != "markdown") { printf "\n== %s\n%s%s\n", title(key), note == "" ? "" : note "\n", text sprintf(" %7s  %s", "rounds", "key change"); return }
    printf "\n**%s**\n\n%s%s key change |\n%s---|\n", title(key), note == "" ? "" : note "\n\n", md, rule
}

function print_table(key,    list, n, i, j, tmp, s, flash, dflt, fa4, dtype, tf, parts, cols) {
    n = split(steps_of[key], list, " ")
    for (i = 2; i <= n; i++)  # insertion sort by rank: a handful of rows
        for (j = i; j > 1 && rank(list[j - 1]) > rank(list[j]); j--) { tmp = list[j]; list[j] = list[j - 1]; list[j - 1] = tmp }
    if (backward == 1) { print_backward_table(key, list, n); return }
    if (key in is_decode) { print_decode_table(key, list, n); return }
    split(key, parts, "|"); dtype = parts[1]
    flash = tflops_of(key, "torch_sdpa_flash")
    dflt = tflops_of(key, "torch_sdpa_default")
    fa4 = tflops_of(key, "fa4")
    cols = LABEL_COLS ";8|TFLOP/s|TFLOP/s;13|vs torch-FA2|vs torch-FA2;16|vs default SDPA|vs default SDPA" fa4_col() \
           ";14|% of mma.sync ceiling|% of mma.sync;11|% of wgmma ceiling|% of wgmma"
    print_header(key, cols)
    for (i = 1; i <= n; i++) {
        s = list[i]
        tf = tflops_of(key, s)
        print_row(key, s, cols, fmt_tflops(tf) ";" fmt_ratio(tf, flash) ";" fmt_ratio(tf, dflt) fa4_cell(tf, fa4) ";" \
                                ceiling_share(key, s, tf, dtype, 0) ";" ceiling_share(key, s, tf, dtype, 1))
    }
}

# A row's TFLOP/s as a share of the mma.sync ceiling (wgmma 0) or of wgmma's (wgmma 1), or "-".
# The ceiling is a GPU's: a CPU row (step 00) gets none. A step gets the ceiling of the
# instruction it runs (wgmma for the steps of wgmma_steps, mma.sync for the others); a
# baseline, and every row when the wgmma steps are not known, gets both.
function ceiling_share(key, s, tf, dtype, wgmma,    top) {
    if (wgmma) top = (dtype in wgmma_ceiling) ? wgmma_ceiling[dtype] : 0
    else top = (dtype in ceiling) ? ceiling[dtype] : 0
    if (tf == "" || top == 0 || device[key, s] == "CPU") return "-"
    if (s ~ /^[0-9][0-9]_/ && n_wgmma > 0 && (substr(s, 1, 2) in runs_wgmma) != wgmma) return "-"
    return sprintf("%.1f%%", 100 * tf / top)
}

# The decode table: bytes, not flops, are the work. A KV cache's table takes its torch ratios
# from the contiguous cache's rows (paged: the same bytes) or has none (per-sequence lengths).
function print_decode_table(key, list, n,    i, s, flash, cudnn, dflt, gb, pct, cols, base, note) {
    base = key
    if (key ~ /\|lens=/) {
        base = ""
        note = "No torch ratios: torch SDPA takes no per-sequence key count for a dense batch (short of padding every sequence to the longest)."
    } else if (key ~ /\|page=/) {
        base = dense_key(key)
        note = "Torch ratios against torch SDPA on the contiguous cache of the same shape (the same bytes; torch SDPA has no paged input)."
    }
    flash = gbps_of(base, "torch_sdpa_flash"); cudnn = gbps_of(base, "torch_sdpa_cudnn"); dflt = gbps_of(base, "torch_sdpa_default")
    cols = LABEL_COLS ";8|GB/s|GB/s;15|% of bandwidth|% of bandwidth;13|vs torch-FA2|vs torch-FA2;9|vs cuDNN|vs cuDNN" \
           ";16|vs default SDPA|vs default SDPA"
    print_header(key, cols, note)
    for (i = 1; i <= n; i++) {
        s = list[i]
        gb = gbps_of(key, s)
        pct = gb != "" && bandwidth > 0 && device[key, s] != "CPU" ? sprintf("%.1f%%", 100 * gb / bandwidth) : "-"
        print_row(key, s, cols, fmt_tflops(gb) ";" pct ";" fmt_ratio(gb, flash) ";" fmt_ratio(gb, cudnn) ";" fmt_ratio(gb, dflt))
    }
}

# The backward's table: its TFLOP/s (2.5 forwards), against torch's backward per backend, and
# the share of the ceiling of the instruction a row runs (ceiling_share: step 14 mma.sync's,
# step 15 wgmma's, torch's rows both).
function print_backward_table(key, list, n,    i, s, flash, cudnn, dflt, fa4, dtype, parts, tf, cols) {
    split(key, parts, "|"); dtype = parts[1]
    flash = tflops_of(key, "torch_sdpa_flash"); cudnn = tflops_of(key, "torch_sdpa_cudnn"); dflt = tflops_of(key, "torch_sdpa_default")
    fa4 = tflops_of(key, "fa4")
    cols = LABEL_COLS ";8|TFLOP/s|TFLOP/s;13|vs torch-FA2|vs torch-FA2;9|vs cuDNN|vs cuDNN;16|vs default SDPA|vs default SDPA" \
           fa4_col() ";14|% of mma.sync ceiling|% of mma.sync;11|% of wgmma ceiling|% of wgmma"
    print_header(key, cols)
    for (i = 1; i <= n; i++) {
        s = list[i]
        tf = tflops_of(key, s)
        print_row(key, s, cols, fmt_tflops(tf) ";" fmt_ratio(tf, flash) ";" fmt_ratio(tf, cudnn) ";" fmt_ratio(tf, dflt) \
                                fa4_cell(tf, fa4) ";" ceiling_share(key, s, tf, dtype, 0) ";" ceiling_share(key, s, tf, dtype, 1))
    }
}

# Markdown: steps down, the sweep's seqlens across, TFLOP/s in the cells.
function print_sweep(    specs, n_specs, i, j, k, key, keys, n_keys, steps, n_steps, list, n, s, row, tmp, f) {
    n_specs = split(sweep, specs, ";")
    n_keys = 0; n_steps = 0
    for (i = 1; i <= n_specs; i++) {
        if ((key = spec_key(specs[i])) == "" || !(key in seen_shape)) continue
        keys[++n_keys] = key
        n = split(steps_of[key], list, " ")
        for (j = 1; j <= n; j++) if (!(list[j] in in_sweep)) { in_sweep[list[j]] = 1; steps[++n_steps] = list[j] }
    }
    if (n_keys < 2) return
    for (i = 2; i <= n_steps; i++)
        for (j = i; j > 1 && rank(steps[j - 1]) > rank(steps[j]); j--) { tmp = steps[j]; steps[j] = steps[j - 1]; steps[j - 1] = tmp }
    split(specs[1], f, " ")
    printf "\n**%s: TFLOP/s vs sequence length (batch x seqlen = %d, H=%s, d=%s, %s)**\n\n", f[8], f[1] * f[4],
           f[2], f[6], f[7] == 1 ? "causal" : "non-causal"
    row = "| step |"; tmp = "|---|"
    for (k = 1; k <= n_keys; k++) { split(keys[k], f, " "); row = row " N=" f[4] " |"; tmp = tmp "---:|" }
    print row; print tmp
    for (i = 1; i <= n_steps; i++) {
        s = steps[i]; row = "| " s " |"
        for (k = 1; k <= n_keys; k++)
            row = row " " fmt_tflops(tflops_of(keys[k], s)) (status[keys[k], s] == "FAIL" ? " (FAIL)" : "") " |"
        print row
    }
}

# The README's one table (mode=front): a row per step, each at its own headline shape: the
# forward steps at front_shapes' first (prefill) shape, the steps of decode_steps at its second
# (decode) shape, in GB/s and % of the bandwidth, the backward's steps (those with backward
# rows) at its third, their backward's TFLOP/s; each against torch's cuDNN and FA2 backends at
# the same shape (the backward against theirs). front_info is a file of tab-separated lines,
# one per step in order: its number, what it adds, what it runs on, its page.
# The step numbered id among a shape's rows ("" if it has none there).
function step_at(key, id,    list, m, i) {
    m = split(steps_of[key], list, " ")
    for (i = 1; i <= m; i++) if (substr(list[i], 1, 3) == id "_") return list[i]
    return ""
}

function front_row(id, adds, runs, page,    keys, n, kind, key, s, dtype, rate, top, what, unit, share, cpu) {
    n = split(front_shapes, keys, ";")
    key = n >= 3 ? "B:" spec_key(keys[3]) : ""
    if (key != "" && (s = step_at(key, id)) != "") kind = 3  # a step with a backward: its backward's row
    else { kind = (id in front_decode) ? 2 : 1; key = spec_key(keys[kind]); s = step_at(key, id) }
    if (s == "" || median_ms(key, s) == "") { printf "| [%s](%s) | %s | %s | - | - | - | - | - |\n", id, page, adds, runs; return }
    split(key, keys, "|"); dtype = keys[1]; sub(/^B:/, "", dtype)
    rate = front_rate(key, s, kind)
    if (kind == 2) { top = bandwidth; what = "bandwidth"; unit = "GB/s" }
    else {
        what = (substr(s, 1, 2) in runs_wgmma) ? "wgmma" : "mma.sync"
        top = what == "wgmma" ? wgmma_ceiling[dtype] : ceiling[dtype]; unit = "TFLOP/s"
    }
    cpu = device[key, s] == "CPU"
    share = cpu || top + 0 == 0 ? "-" : sprintf(100 * rate / top >= 10 ? "%.0f%% of %s" : "%.1f%% of %s", 100 * rate / top, what)
    printf "| [%s](%s)%s | %s | %s | %s | %s %s | %s | %s | %s |\n", id, page, status[key, s] == "PASS" ? "" : " [" status[key, s] "]",
           adds, runs, fmt_ms(median_ms(key, s)), fmt_tflops(rate), unit, share,
           cpu ? "-" : fmt_ratio(rate, front_rate(key, "torch_sdpa_cudnn", kind)),
           cpu ? "-" : fmt_ratio(rate, front_rate(key, "torch_sdpa_flash", kind))
}

# A row's rate at a front shape: GB/s of K and V at the decode shape (kind 2), else TFLOP/s.
function front_rate(key, s, kind) { return kind == 2 ? gbps_of(key, s) : tflops_of(key, s) }

function print_front(    line, f, n, ids, i) {
    n = split(decode_steps, ids, " ")
    for (i = 1; i <= n; i++) front_decode[ids[i]] = 1
    print "| step | what it adds | runs on | time (ms) | speed | % of ceiling | vs cuDNN | vs torch's FA2 |"
    print "|---|---|---|---:|---:|---:|---:|---:|"
    while ((getline line < front_info) > 0) {
        split(line, f, "\t")
        front_row(f[1], f[2], f[3], f[4])
    }
}

END {
    if (mode == "count_backward") { print n_backward + 0; exit }
    if (mode == "front") { print_front(); exit }
    if (shapes == "") {
        for (i = 1; i <= n_shapes; i++) print_table(shape_order[i])
    } else {
        n_specs = split(shapes, specs, ";")
        for (i = 1; i <= n_specs; i++) {
            if ((key = spec_key(specs[i])) != "" && key in seen_shape) print_table(key)
        }
    }
    if (mode == "markdown" && sweep != "") print_sweep()
}
