/* A program linked with libfabriclib dies of its own signals: a segfault
 * leaves SIGSEGV (and a core where enabled), a SIGTERM ends it as SIGTERM.
 * Debian's libfabric loads libinfinipath (its psm provider), which installs
 * handlers for SIGINT, SIGILL, SIGABRT, SIGBUS, SIGSEGV and SIGTERM that
 * print a backtrace and exit(1); fabriclib gives those signals back when it
 * loads. Each case runs in a child; the parent checks how it ended. Where
 * libinfinipath is not loaded the test still runs (it then says so). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fabriclib.h"

static int loaded(const char *lib) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (f && fgets(line, sizeof line, f)) found |= strstr(line, lib) != NULL;
    if (f) fclose(f);
    return found;
}

/* How a child that does `what` ends: the signal that killed it, or -exit code. */
static int ends(int what) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        /* The library is in use, not just mapped. */
        if (!fabriclib_version()) _exit(2);
        if (what == SIGSEGV) {
            int *volatile nowhere = NULL;
            *nowhere = 1;
        }
        raise(what);
        _exit(3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? WTERMSIG(st) : -WEXITSTATUS(st);
}

int main(void) {
    printf("libinfinipath %s\n", loaded("libinfinipath") ? "loaded (its handlers must be gone)" : "not loaded");
    int failures = 0;
    const int sigs[] = {SIGSEGV, SIGTERM, SIGABRT, SIGINT};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        int got = ends(sigs[i]);
        if (got != sigs[i]) {
            fprintf(stderr, "FAIL: %s: the child ended with %s %d\n", strsignal(sigs[i]), got < 0 ? "exit" : "signal",
                    got < 0 ? -got : got);
            failures++;
        } else {
            printf("ok: %s ends the process as %s\n", strsignal(sigs[i]), strsignal(got));
        }
    }
    printf("capi_signals: %d failed\n", failures);
    return failures != 0;
}
