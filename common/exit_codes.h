/* exit_codes.h - the exit codes of every program of the harness (the step
 * binaries list them in --help; the probes and tests use the same). */
#ifndef FA2_EXIT_CODES_H
#define FA2_EXIT_CODES_H

#define FA2_EXIT_CHECK 1     /* the output failed the check against the fp64 reference */
#define FA2_EXIT_USAGE 2     /* bad input: a flag, a value, or params the step refuses */
#define FA2_EXIT_NO_DEVICE 3 /* the machine cannot run the step (no GPU, or one too old) */
#define FA2_EXIT_RUNTIME 4   /* a host allocation or a CUDA call failed (the reason is printed) */

#endif
