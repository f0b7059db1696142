#!/usr/bin/env python3
"""How far ahead of its use each mma.sync fragment is loaded, in the SASS.

Reads the SASS of one kernel (cuobjdump -sass, the one function; no GPU needed) and, over
its first loop body (the first N HMMA: the unmasked key tile of steps 07 and 08), finds for
each HMMA the nearest earlier LDSM (ldmatrix) that wrote one of its A or B registers, and
prints how many instructions lie between them. A short distance leaves the warp waiting
on the load's result (a short-scoreboard stall) unless other warps fill the time.

  cuobjdump -sass -arch sm_90 build/step08/kernel.o > /tmp/step08.sass
  python3 tools/ldsm_distance.py /tmp/step08.sass '6__halfLi128E10TileConfigILi8ELi1ELi128E' 256

usage: python3 tools/ldsm_distance.py SASS FUNCTION_SUBSTRING HMMA_COUNT
"""
import re
import statistics
import sys

INSTRUCTION = re.compile(r"/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*(.*?)\s*;")
REGISTER = re.compile(r"\bR(\d+)\b")


def function_body(lines, name):
    """The instructions of the first function whose header contains `name`."""
    body, inside = [], False
    for line in lines:
        if "Function : " in line:
            if inside:
                break
            inside = name in line
            continue
        match = INSTRUCTION.search(line) if inside else None
        if match:
            body.append((match.group(1), match.group(2)))
    return body


def main():
    if len(sys.argv) != 4 or not sys.argv[3].isdigit() or int(sys.argv[3]) < 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1]) as f:
            body = function_body(f.readlines(), sys.argv[2])
    except OSError as e:
        print(f"error: SASS '{sys.argv[1]}': {e.strerror}", file=sys.stderr)
        return 2
    hmma = [i for i, (op, _) in enumerate(body) if op.startswith("HMMA")]
    count = int(sys.argv[3])
    if len(hmma) < count:
        print(f"error: FUNCTION_SUBSTRING '{sys.argv[2]}' gives {len(hmma)} HMMA (allowed: a function with at least {count})",
              file=sys.stderr)
        return 2
    first, last = hmma[0], hmma[count - 1]
    written_at = {}  # register -> index of the last LDSM that wrote it
    distances = []
    for i, (op, operands) in enumerate(body[: last + 1]):
        registers = [int(r) for r in REGISTER.findall(operands)]
        if op.startswith("LDSM"):
            width = 4 if op.endswith(".4") else 2 if op.endswith(".2") else 1  # matrices = registers written
            for k in range(width):
                written_at[registers[0] + k] = i
        elif op.startswith("HMMA") and i >= first:
            sources = registers[1:3]  # A and B: their first registers (a fragment's registers load together)
            loads = [i - written_at[r] for r in sources if r in written_at]
            if loads:
                distances.append(min(loads))
    if not distances:
        print("no HMMA in the loop reads an LDSM result")
        return 1
    near = lambda n: 100.0 * sum(d <= n for d in distances) / len(distances)
    print(f"{count} HMMA over {last - first + 1} instructions; {len(distances)} read an LDSM result: "
          f"median {statistics.median(distances):g} instructions after it, fewest {min(distances)}, "
          f"{near(4):.0f}% within 4, {near(8):.0f}% within 8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
