/* tool.h - what every scratch program shares besides the layouts: the command
 * line, PASS/FAIL lines for --check, and a grid printer with row and column
 * headers. Include it first: it asks for POSIX (isatty, fileno). */
#ifndef SCRATCH_TOOL_H
#define SCRATCH_TOOL_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* printf-style argument checking where the compiler knows the attribute */
#if defined(__GNUC__)
#define PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define PRINTF_LIKE(fmt, args)
#endif

/* ---- the GPU verifiers (CUDA) ---- */

#ifdef __CUDACC__
/* A CUDA call of a GPU verifier that fails ends it with one FAIL line naming the call
 * and the runtime's reason, exit 1. VERIFIER is the program's name, defined before use. */
#define CUDA_OK(call)                                                                       \
    do {                                                                                    \
        cudaError_t err_ = (call);                                                          \
        if (err_ != cudaSuccess) {                                                          \
            printf("FAIL %s: %s: %s\n", VERIFIER, #call, cudaGetErrorString(err_));         \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)
#endif

/* ---- --check: one line per property ---- */

static int check_failures;

static inline void check(int ok, const char *name, const char *why_fmt, ...) PRINTF_LIKE(3, 4);

static inline void check(int ok, const char *name, const char *why_fmt, ...)
{
    if (ok) {
        printf("PASS %s\n", name);
        return;
    }
    va_list ap;
    va_start(ap, why_fmt);
    printf("FAIL %s: ", name);
    vprintf(why_fmt, ap);
    putchar('\n');
    va_end(ap);
    check_failures++;
}

static inline int check_exit_code(void) { return check_failures ? 1 : 0; }

/* ---- command line ---- */

/* One option taking a value, as "--flag VALUE" or "--flag=VALUE". A number
 * must be lo, lo + step, ..., hi; with words ("q|k|v|all") the value stored is
 * the index of the word given. */
typedef struct {
    const char *flag;
    int *value;
    int lo, hi, step;
    const char *words;
} cli_option;

/* Bad input: one line on stderr and exit code 2, as the harness does. */
static inline void cli_error(const char *fmt, ...) PRINTF_LIKE(1, 2);
static inline void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static inline int word_index(const char *words, const char *given)
{
    size_t len = strlen(given);
    int index = 0;
    for (const char *w = words; *w; index++) {
        size_t wlen = strcspn(w, "|");
        if (wlen == len && strncmp(w, given, len) == 0) return index;
        w += wlen + (w[wlen] == '|');
    }
    return -1;
}

static inline void set_option(const cli_option *opt, const char *given)
{
    if (opt->words) {
        *opt->value = word_index(opt->words, given);
        if (*opt->value < 0) cli_error("%s must be one of %s (got '%s')", opt->flag, opt->words, given);
        return;
    }
    char *end;
    long v = strtol(given, &end, 10);
    if (*given == '\0' || *end != '\0' || v < opt->lo || v > opt->hi || (v - opt->lo) % opt->step != 0) {
        if (opt->step == opt->hi - opt->lo)
            cli_error("%s must be %d or %d (got '%s')", opt->flag, opt->lo, opt->hi, given);
        cli_error("%s must be an integer from %d to %d (got '%s')", opt->flag, opt->lo, opt->hi, given);
    }
    *opt->value = (int)v;
}

/* --help prints `usage` and exits 0; --check (where run_checks is given) runs
 * the program's property checks and exits with their verdict; anything else
 * must be one of `opts`. */
static inline void parse_cli(int argc, char **argv, const char *usage, const cli_option *opts, int count,
                             void (*run_checks)(void))
{
    int check_mode = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage, stdout);
            exit(0);
        }
        if (run_checks && strcmp(arg, "--check") == 0) {
            check_mode = 1;
            continue;
        }
        const cli_option *match = NULL;
        const char *given = NULL;
        for (int o = 0; o < count && !match; o++) {
            size_t len = strlen(opts[o].flag);
            if (strncmp(arg, opts[o].flag, len) != 0) continue;
            if (arg[len] == '=') match = &opts[o], given = arg + len + 1;
            else if (arg[len] == '\0') match = &opts[o], given = i + 1 < argc ? argv[++i] : NULL;
        }
        if (!match) cli_error("unknown argument '%s' (see --help)", arg);
        if (!given) cli_error("%s needs a value (see --help)", match->flag);
        set_option(match, given);
    }
    if (check_mode) {
        run_checks();
        exit(check_exit_code());
    }
}

/* ---- colour and grids ---- */

/* ANSI colour only for a terminal (and not when NO_COLOR is set), so that
 * piped output, logs and the docs' examples stay plain text. */
static inline int colour_enabled(void)
{
    static int enabled = -1;
    if (enabled < 0) enabled = isatty(fileno(stdout)) && !getenv("NO_COLOR");
    return enabled;
}

enum { PALETTE = 8, NO_COLOUR = -1 };

/* Right-aligns text in width columns, coloured by palette[colour % 8]. */
static inline void put_cell(const char *text, int width, int colour)
{
    static const int palette[PALETTE] = {31, 32, 33, 34, 35, 36, 91, 94};
    if (colour >= 0 && colour_enabled()) printf("\033[%dm%*s\033[0m", palette[colour % PALETTE], width, text);
    else printf("%*s", width, text);
}

typedef struct {
    char text[24];
    int colour; /* palette index, or NO_COLOUR */
} grid_cell;

typedef void (*grid_cell_fn)(int row, int col, const void *ctx, grid_cell *cell);

typedef struct {
    const char *corner; /* what rows and columns count, e.g. "m\\k" */
    int rows, cols;
    int width;          /* characters per cell */
    int col_group;      /* a bar every col_group columns (0: none) */
    int row_group;      /* a rule every row_group rows (0: none) */
} grid_shape;

static inline void print_rule(const grid_shape *g)
{
    int bars = g->col_group ? (g->cols - 1) / g->col_group : 0;
    fputs("------+", stdout);
    for (int i = 0; i < g->cols * (g->width + 1) + bars * 2 + 1; i++) putchar('-');
    putchar('\n');
}

static inline void print_grid(const grid_shape *g, grid_cell_fn fn, const void *ctx)
{
    printf("%5s |", g->corner);
    for (int c = 0; c < g->cols; c++) {
        if (g->col_group && c && c % g->col_group == 0) printf(" |");
        printf(" %*d", g->width, c);
    }
    putchar('\n');
    print_rule(g);
    for (int r = 0; r < g->rows; r++) {
        if (g->row_group && r && r % g->row_group == 0) print_rule(g);
        printf("%5d |", r);
        for (int c = 0; c < g->cols; c++) {
            grid_cell cell = {"", NO_COLOUR};
            fn(r, c, ctx, &cell);
            if (g->col_group && c && c % g->col_group == 0) printf(" |");
            putchar(' ');
            put_cell(cell.text, g->width, cell.colour);
        }
        putchar('\n');
    }
}

/* ---- inverse maps, for the bijection checks of the fragment programs ---- */

/* owner[row][col] = a code for who holds the element (each program has its own),
 * OWNER_NONE where nobody does. Filled from the forward formulas: a second claim on
 * an element, or a claim outside rows x cols, counts as a collision, so a map that
 * is not a bijection fails owner_complete. Sized for the largest tile, wgmma's
 * 64 x 256 accumulator. */
enum { OWNER_NONE = -1, OWNER_MAX_ROWS = 64, OWNER_MAX_COLS = 256 };

typedef struct {
    int rows, cols, collisions;
    int owner[OWNER_MAX_ROWS][OWNER_MAX_COLS];
} owner_grid;

static inline void owner_init(owner_grid *g, int rows, int cols)
{
    g->rows = rows, g->cols = cols, g->collisions = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) g->owner[r][c] = OWNER_NONE;
}

static inline void owner_put(owner_grid *g, int row, int col, int code)
{
    if (row < 0 || row >= g->rows || col < 0 || col >= g->cols || g->owner[row][col] != OWNER_NONE) g->collisions++;
    else g->owner[row][col] = code;
}

/* Every element of rows x cols claimed exactly once. */
static inline int owner_complete(const owner_grid *g)
{
    if (g->collisions) return 0;
    for (int r = 0; r < g->rows; r++)
        for (int c = 0; c < g->cols; c++)
            if (g->owner[r][c] == OWNER_NONE) return 0;
    return 1;
}

#endif /* SCRATCH_TOOL_H */
