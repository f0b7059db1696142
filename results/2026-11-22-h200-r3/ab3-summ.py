import csv, sys, statistics as st, collections
ab = list(csv.DictReader(open(sys.argv[1])))
sd = list(csv.DictReader(open(sys.argv[2]))) if len(sys.argv) > 2 else []
key = lambda r: (r['batch'], r['heads_q'], r['seqlen_q'], r['head_dim'], r['causal'])
t = collections.defaultdict(list)
for r in ab: t[(key(r), r['variant'])].append(float(r['ms_median']))
fl = {key(r): float(r['ms_median']) for r in sd if r['step'] == 'torch_sdpa_flash'}
variants = list(dict.fromkeys(r['variant'] for r in ab))
for k in dict.fromkeys(key(r) for r in ab):
    base = st.median(t[(k, 'base')]) if (k, 'base') in t else None
    line = f"B{k[0]} H{k[1]} N{k[2]} d{k[3]} c{k[4]} flash={fl.get(k, float('nan')):.4f}:"
    for v in variants:
        if (k, v) not in t: continue
        m = st.median(t[(k, v)])
        line += f"  {v} {m:.4f} ({base/m if base else 0:.3f}x base, {fl.get(k, float('nan'))/m:.3f}x fa2)"
    print(line)
