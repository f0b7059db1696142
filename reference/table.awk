# reference/table.awk - the comparison tables from a compare CSV (the harness's columns):
#   step | time (ms) | TFLOP/s | vs torch-FA2 | vs default SDPA | % of mma.sync ceiling | % of wgmma ceiling | key change
# (the ceilings: probes mma_sync_m16n8k16 and, on Hopper, wgmma_m64n256k16 of the ceiling CSV)
# one table per shape; the last row of a step at a shape wins (a CSV of a day collects re-runs).
#
# awk -v mode=text|markdown -v ceiling_csv=FILE -v shapes="B H HKV N D C;..." \
#     [-v sweep="B H HKV N D C;..."] -f reference/table.awk compare.csv
#   shapes: which shapes, in this order (default: every shape of the CSV, in CSV order);
#   sweep (markdown): one more table, TFLOP/s per step at each of these shapes' seqlen.
# Ratios are speed ratios to torch SDPA in the same CSV (> 1: faster than torch).
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
    torch_order = "torch_sdpa_flash torch_sdpa_cudnn torch_sdpa_efficient torch_sdpa_math torch_sdpa_default"
    n_torch = split(torch_order, torch_names, " ")
    peer_text["torch_sdpa_flash"] = "PyTorch SDPA, FLASH_ATTENTION backend (FlashAttention-2)"
    peer_text["torch_sdpa_cudnn"] = "PyTorch SDPA, CUDNN_ATTENTION backend (cuDNN fused attention)"
    peer_text["torch_sdpa_efficient"] = "PyTorch SDPA, EFFICIENT_ATTENTION backend (memory-efficient attention)"
    peer_text["torch_sdpa_math"] = "PyTorch SDPA, MATH backend (unfused PyTorch ops)"
    peer_text["torch_sdpa_default"] = "PyTorch SDPA, no backend restriction (what a user gets)"
}

FNR == 1 && $1 == "step" { next }
NF >= 19 {
    key = shape_key($4, $5, $6, $7, ($8 == $9 ? $8 : $8 "/" $9), $10, $11)
    if (!(key in seen_shape)) { seen_shape[key] = 1; shape_order[++n_shapes] = key }
    if (!((key, $1) in ms)) steps_of[key] = steps_of[key] " " $1
    ms[key, $1] = $19 == "UNSUPPORTED" ? "" : $12; status[key, $1] = $19; device[key, $1] = $2
    # From the time, not the CSV's 2-decimal column: step 00 on the CPU is below 0.01 TFLOP/s.
    tflops[key, $1] = valid(ms[key, $1]) ? 4 * $5 * $6 * visible_pairs($8, $9, $11) * $10 / ($12 * 1e-3) / 1e12 : ""
}

# Query-key pairs one head computes, as fa2_visible_pairs: row i sees keys j <= i + seqlen_k - seqlen_q.
function visible_pairs(nq, nk, causal,    shift) {
    if (causal != 1) return nq * nk
    shift = nk - nq
    return shift >= 0 ? nq * (shift + 1) + nq * (nq - 1) / 2 : nk * (nk + 1) / 2
}

function shape_key(dtype, b, h, hkv, n, d, causal) { return dtype "|" b " " h " " hkv " " n " " d " " causal }

function valid(x) { return x ~ /^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ && x + 0 > 0 }

# Sort key: the steps in order, then the cuBLAS baseline, then torch's backends, then the rest.
function rank(step,    i) {
    if (step ~ /^[0-9][0-9]_/) return "0 " step
    if (step == "cublas_unfused") return "1"
    for (i = 1; i <= n_torch; i++) if (torch_names[i] == step) return "2 " i
    return "3 " step
}

# The first line of a step's kernel file reads "/* Step NN - what it adds."; the text after the dash.
function key_change(step,    file, line, ext, k) {
    if (step in peer_text) return peer_text[step]
    if (step in key_cache) return key_cache[step]
    line = ""
    if (step == "cublas_unfused") {
        file = "reference/cublas_unfused.cu"
        if ((getline line < file) <= 0) line = ""
        close(file)
    } else if (step ~ /^[0-9][0-9]_/) {
        split("cu c", exts, " ")
        for (ext = 1; ext <= 2 && line == ""; ext++) {
            file = "steps/" step "/kernel." exts[ext]
            if ((getline line < file) <= 0) line = ""
            close(file)
        }
    }
    k = index(line, " - ")
    line = k ? substr(line, k + 3) : ""
    sub(/[ \t]*(\*\/)?[ \t]*$/, "", line)
    sub(/\.$/, "", line)
    key_cache[step] = line
    return line
}

function fmt_ms(x) { return !valid(x) ? "-" : (x < 1 ? sprintf("%.4f", x) : (x < 100 ? sprintf("%.3f", x) : sprintf("%.1f", x))) }
function fmt_tflops(x) { return !valid(x) ? "-" : (x < 1 ? sprintf("%.3f", x) : (x < 100 ? sprintf("%.1f", x) : sprintf("%.0f", x))) }
function fmt_ratio(x, ref) { return !(valid(x) && valid(ref)) ? "-" : (x / ref < 0.01 ? "<0.01x" : sprintf("%.2fx", x / ref)) }

function title(key,    parts, f, dtype) {
    split(key, parts, "|"); dtype = parts[1]
    split(parts[2], f, " ")
    return dtype ", B=" f[1] ", H=" f[2] (f[3] != f[2] ? " (KV " f[3] ")" : "") ", N=" f[4] ", d=" f[5] ", " \
           (f[6] == 1 ? "causal" : "non-causal")
}

function print_table(key,    list, n, i, j, tmp, s, flash, dflt, dtype, tf, pct, wpct, label, parts, kc) {
    n = split(steps_of[key], list, " ")
    for (i = 2; i <= n; i++)  # insertion sort by rank: a handful of rows
        for (j = i; j > 1 && rank(list[j - 1]) > rank(list[j]); j--) { tmp = list[j]; list[j] = list[j - 1]; list[j - 1] = tmp }
    split(key, parts, "|"); dtype = parts[1]
    flash = tflops[key, "torch_sdpa_flash"]
    dflt = tflops[key, "torch_sdpa_default"]
    if (mode == "markdown") {
        printf "\n**%s**\n\n", title(key)
        print "| step | time (ms) | TFLOP/s | vs torch-FA2 | vs default SDPA | % of mma.sync ceiling | % of wgmma ceiling | key change |"
        print "|---|---:|---:|---:|---:|---:|---:|---|"
    } else {
        printf "\n== %s\n", title(key)
        printf "%-36s %10s %8s %13s %16s %14s %11s  %s\n", "step", "time (ms)", "TFLOP/s", "vs torch-FA2", "vs default SDPA",
               "% of mma.sync", "% of wgmma", "key change"
    }
    for (i = 1; i <= n; i++) {
        s = list[i]
        tf = tflops[key, s]
        # The ceiling is a GPU's: a CPU row (step 00) gets none.
        pct = valid(tf) && (dtype in ceiling) && device[key, s] != "CPU" ? sprintf("%.1f%%", 100 * tf / ceiling[dtype]) : "-"
        wpct = valid(tf) && (dtype in wgmma_ceiling) && device[key, s] != "CPU" ? sprintf("%.1f%%", 100 * tf / wgmma_ceiling[dtype]) : "-"
        label = s (status[key, s] == "PASS" ? "" : " [" status[key, s] "]")
        kc = key_change(s)
        if (mode == "markdown") {
            gsub(/\|/, "\\|", kc)
            printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", label, fmt_ms(ms[key, s]),
                   fmt_tflops(tf), fmt_ratio(tf, flash), fmt_ratio(tf, dflt), pct, wpct, kc
        } else {
            printf "%-36s %10s %8s %13s %16s %14s %11s  %s\n", label, fmt_ms(ms[key, s]),
                   fmt_tflops(tf), fmt_ratio(tf, flash), fmt_ratio(tf, dflt), pct, wpct, kc
        }
    }
}

# Markdown: steps down, the sweep's seqlens across, TFLOP/s in the cells.
function print_sweep(    specs, n_specs, i, j, k, d, key, keys, n_keys, steps, n_steps, list, n, s, row, tmp, f) {
    n_specs = split(sweep, specs, ";")
    for (d = 1; d <= n_dtypes; d++) {
        n_keys = 0; n_steps = 0
        for (i = 1; i <= n_specs; i++) {
            split(specs[i], f, " ")
            key = shape_key(dtypes[d], f[1], f[2], f[3], f[4], f[5], f[6])
            if (!(key in seen_shape)) continue
            keys[++n_keys] = key
            n = split(steps_of[key], list, " ")
            for (j = 1; j <= n; j++) if (!((d, list[j]) in in_sweep)) { in_sweep[d, list[j]] = 1; steps[++n_steps] = list[j] }
        }
        if (n_keys < 2) continue
        for (i = 2; i <= n_steps; i++)
            for (j = i; j > 1 && rank(steps[j - 1]) > rank(steps[j]); j--) { tmp = steps[j]; steps[j] = steps[j - 1]; steps[j - 1] = tmp }
        split(specs[1], f, " ")
        printf "\n**%s: TFLOP/s vs sequence length (batch x seqlen = %d, H=%s, d=%s, %s)**\n\n", dtypes[d], f[1] * f[4],
               f[2], f[5], f[6] == 1 ? "causal" : "non-causal"
        row = "| step |"; tmp = "|---|"
        for (k = 1; k <= n_keys; k++) { split(keys[k], f, " "); row = row " N=" f[4] " |"; tmp = tmp "---:|" }
        print row; print tmp
        for (i = 1; i <= n_steps; i++) {
            s = steps[i]; row = "| " s " |"
            for (k = 1; k <= n_keys; k++)
                row = row " " ((keys[k], s) in tflops ? fmt_tflops(tflops[keys[k], s]) : "-") \
                      (status[keys[k], s] == "FAIL" ? " (FAIL)" : "") " |"
            print row
        }
    }
}

END {
    for (i = 1; i <= n_shapes; i++) {  # dtypes in CSV order
        split(shape_order[i], parts, "|")
        if (!(parts[1] in dtype_seen)) { dtype_seen[parts[1]] = 1; dtypes[++n_dtypes] = parts[1] }
    }
    if (shapes == "") {
        for (i = 1; i <= n_shapes; i++) print_table(shape_order[i])
    } else {
        n_specs = split(shapes, specs, ";")
        for (d = 1; d <= n_dtypes; d++)
            for (i = 1; i <= n_specs; i++) {
                split(specs[i], f, " ")
                if (f[1] == "") continue
                key = shape_key(dtypes[d], f[1], f[2], f[3], f[4], f[5], f[6])
                if (key in seen_shape) print_table(key)
            }
    }
    if (mode == "markdown" && sweep != "") print_sweep()
}
