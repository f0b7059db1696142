#!/usr/bin/env python3
"""The figures of docs/, drawn from the layouts the kernels use.

Each figure is drawn by one script in figures/ from the machine-readable output of a
scratch program (the same formulas, scratch/layouts.h, that the kernels' comments cite and
the GPU verifiers check). `make figures` runs each program, keeps its output beside the
figure (docs/figures/NAME.csv) and draws docs/figures/NAME.svg; docs/figures/MANIFEST holds
the SHA-256 of each figure's data and of its script. `--check` (what make test runs, no
matplotlib needed) runs the programs again and fails a figure whose data or script no longer
match the manifest: the committed figure is stale.

usage: python3 figures/make.py [--check]      (from the repository root, scratch built)
"""
import hashlib
import pathlib
import subprocess
import sys

# name: (the script that draws it, the scratch program and arguments that give its data)
FIGURES = {
    "swizzle_banks": ("figures/swizzle_banks.py", ["build/scratch/swizzle", "--dim", "128", "--rows", "8", "--format", "csv"]),
    "tma_slabs": ("figures/tma_slabs.py", ["build/scratch/swizzle", "--dim", "128", "--rows", "16", "--format", "csv"]),
    "fragments": ("figures/fragments.py", ["build/scratch/mma_fragments", "--format", "csv"]),
    "ldmatrix_lanes": ("figures/ldmatrix_lanes.py", ["build/scratch/ldmatrix", "--use", "k", "--dim", "128", "--format", "csv"]),
    "pipeline": ("figures/pipeline.py", ["build/scratch/copy_layout", "--format", "csv"]),
    "epilogue": ("figures/epilogue.py", ["build/scratch/bank_conflicts", "--dim", "128", "--format", "csv"]),
    "tiling": ("figures/tiling.py", ["build/scratch/tiling", "--format", "csv"]),
    "wgmma_accumulator": ("figures/wgmma_accumulator.py", ["build/scratch/wgmma_fragments", "--n", "128", "--cols", "32", "--format", "csv"]),
    "wgmma_descriptor": ("figures/wgmma_descriptor.py", ["build/scratch/wgmma_fragments", "--format", "descriptors"]),
    "producer_consumer": ("figures/producer_consumer.py", ["build/scratch/ws_schedule", "--step", "10", "--format", "csv"]),
    "skewed_loop": ("figures/skewed_loop.py", ["build/scratch/ws_schedule", "--step", "11", "--format", "csv"]),
    "persistent_schedule": ("figures/persistent_schedule.py", ["build/scratch/persistent_schedule", "--batch", "1", "--heads", "16", "--seqlen", "4096", "--dim", "128", "--causal", "1", "--sms", "132", "--format", "csv"]),
    "split_kv": ("figures/split_kv.py", ["build/scratch/split_kv", "--batch", "1", "--heads", "32", "--kv-heads", "8", "--seqlen-q", "1", "--seqlen-k", "32768", "--dim", "128", "--sms", "132", "--blocks-per-sm", "1", "--scale", "4", "--format", "csv"]),
    "scalar_tiles": ("figures/scalar_tiles.py", ["build/scratch/tiling", "--step", "01", "--dim", "128", "--format", "csv"]),
    "backward_blocks": ("figures/backward_blocks.py", ["build/scratch/backward_blocks", "--batch", "1", "--heads", "2", "--kv-heads", "1", "--seqlen-q", "400", "--seqlen-k", "300", "--dim", "128", "--block-keys", "64", "--causal", "1", "--format", "csv"]),
    "stmatrix_ds": ("figures/stmatrix_ds.py", ["build/scratch/backward_wgmma", "--format", "stmatrix"]),
    "tile_residency": ("figures/tile_residency.py", ["build/scratch/tiling", "--format", "residency", "--dim", "128"]),
    "ring_schedule": ("figures/ring_schedule.py", ["build/scratch/ring_schedule", "--gpus", "4", "--causal", "1", "--format", "csv"]),
}
OUT = pathlib.Path("docs/figures")
MANIFEST = OUT / "MANIFEST"


def sha(data):
    return hashlib.sha256(data).hexdigest()


def data_of(command):
    return subprocess.run(command, check=True, capture_output=True).stdout


def main():
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] not in ([], ["--check"]):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    recorded = {}
    if MANIFEST.exists():
        for line in MANIFEST.read_text().splitlines():
            name, data_sha, script_sha = line.split()
            recorded[name] = (data_sha, script_sha)
    lines, failed = [], 0
    for name, (script, command) in FIGURES.items():
        data = data_of(command)
        now = (sha(data), sha(pathlib.Path(script).read_bytes()))
        if check:
            ok = recorded.get(name) == now and (OUT / f"{name}.svg").exists()
            failed += not ok
            print(f"PASS figure {name} is current" if ok else
                  f"FAIL figure {name} is stale: its data ({' '.join(command)}) or {script} changed since docs/figures/{name}.svg was drawn (run make figures)")
            continue
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"{name}.csv").write_bytes(data)
        subprocess.run([sys.executable, script, str(OUT / f"{name}.csv"), str(OUT / f"{name}.svg")], check=True)
        lines.append(f"{name} {now[0]} {now[1]}")
        print(f"drew docs/figures/{name}.svg")
    if not check:
        MANIFEST.write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
