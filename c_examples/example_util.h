/* What the examples share: CHECK (exit with fabriclib's message on any
 * failure), and the out-of-band exchange: engine addresses and region
 * descriptors travel over a TCP socket on 127.0.0.1 before any transfer (a
 * serving stack uses its own control plane for this). Every failure exits. */
#ifndef FABRICLIB_EXAMPLE_UTIL_H
#define FABRICLIB_EXAMPLE_UTIL_H
#include <fabriclib.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                                                        \
    do {                                                                                                   \
        fabriclib_status s_ = (call);                                                                      \
        if (s_) {                                                                                          \
            fprintf(stderr, "%s: %s: %s\n", #call, fabriclib_status_str(s_), fabriclib_last_error_message()); \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

/* Seconds on the monotonic clock. */
static inline double example_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* An engine on `provider`, bound to `bind` (NULL: 127.0.0.1), whose
 * workers idle as `idle` says (FABRICLIB_IDLE_*). */
static inline fabriclib_engine *example_engine(const char *provider, const char *bind, fabriclib_idle idle) {
    fabriclib_config *cfg;
    fabriclib_engine *e;
    CHECK(fabriclib_config_new(&cfg));
    CHECK(fabriclib_config_set_provider(cfg, provider));
    CHECK(fabriclib_config_set_bind_address(cfg, bind ? bind : "127.0.0.1"));
    CHECK(fabriclib_config_set_idle_policy(cfg, idle));
    CHECK(fabriclib_engine_create(cfg, &e));
    fabriclib_config_free(cfg);
    return e;
}

/* Sends (out != 0) or receives exactly n bytes. */
static inline void oob_xfer(int fd, void *p, size_t n, int out) {
    for (size_t done = 0; done < n;) {
        ssize_t r = out ? write(fd, (char *)p + done, n - done) : read(fd, (char *)p + done, n - done);
        if (r <= 0) { perror("oob socket"); exit(1); }
        done += (size_t)r;
    }
}
static inline void oob_put_blob(int fd, const void *p, size_t n) { oob_xfer(fd, &n, sizeof n, 1); oob_xfer(fd, (void *)p, n, 1); }
static inline size_t oob_get_blob(int fd, void *p, size_t cap) {
    size_t n;
    oob_xfer(fd, &n, sizeof n, 0);
    if (n > cap) { fprintf(stderr, "oob: a %zu-byte blob does not fit %zu bytes\n", n, cap); exit(1); }
    oob_xfer(fd, p, n, 0);
    return n;
}

/* "ADDR:PORT" (IPv4), or (NULL) `port` on 127.0.0.1. */
static inline struct sockaddr_in oob_addr(const char *addr_port, int port) {
    struct sockaddr_in sa;
    char ip[64] = "127.0.0.1";
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    if (addr_port) {
        const char *colon = strrchr(addr_port, ':');
        if (!colon || colon - addr_port >= (long)sizeof ip) { fprintf(stderr, "not ADDR:PORT: %s\n", addr_port); exit(2); }
        memcpy(ip, addr_port, (size_t)(colon - addr_port)), ip[colon - addr_port] = 0;
        port = atoi(colon + 1);
    }
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) { fprintf(stderr, "not an IPv4 address: %s\n", ip); exit(2); }
    return sa;
}

/* Listens on `addr_port` ("ADDR:PORT"; NULL: 127.0.0.1:port). */
static inline int oob_listen(const char *addr_port, int port) {
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = oob_addr(addr_port, port);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 64)) { perror("oob bind"); exit(1); }
    return ls;
}

/* Listens on 127.0.0.1:port and returns the first connection (*listener: close it after). */
static inline int oob_accept(int port, int *listener) {
    *listener = oob_listen(NULL, port);
    return accept(*listener, NULL, NULL);
}

/* Connects to `addr_port` ("ADDR:PORT"; NULL: 127.0.0.1:port), retrying
 * for up to 10 s while the other side starts. */
static inline int oob_connect_to(const char *addr_port, int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = oob_addr(addr_port, port);
    for (int tries = 0; connect(fd, (struct sockaddr *)&sa, sizeof sa); tries++) {
        if (tries > 1000) { perror("oob connect"); exit(1); }
        usleep(10000);
    }
    return fd;
}
static inline int oob_connect(int port) { return oob_connect_to(NULL, port); }

/* Runs fn(who, fd) in a child process on one end of a socketpair, or on
 * `conn` (an accepted connection) when it is >= 0; the parent gets the other
 * end in *fd (if fd is not NULL). The child is killed if the parent dies.
 * Fork before any fabriclib call in this process. */
static inline pid_t example_spawn_on(int (*fn)(int, int), int who, int conn, int *fd) {
    int sv[2] = {-1, conn};
    if (conn < 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) { perror("socketpair"); exit(1); }
    fflush(NULL); /* else the child writes what is buffered (stdout, a JSON file) again */
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(1); }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* no child outlives a coordinator that failed */
        if (sv[0] >= 0) close(sv[0]);
        exit(fn(who, sv[1]));
    }
    close(sv[1]);
    if (fd) *fd = sv[0];
    return pid;
}
static inline pid_t example_spawn(int (*fn)(int, int), int who, int *fd) { return example_spawn_on(fn, who, -1, fd); }

/* All-to-all through the coordinator: reads `k` blobs from each of the `n`
 * children on fd[], then sends every child all of them (child 0's k blobs
 * first, then child 1's, ...), its own included. */
#define EXAMPLE_BLOB_MAX 4096
static inline void example_relay(const int *fd, int n, int k) {
    uint8_t *b = (uint8_t *)malloc((size_t)n * (size_t)k * EXAMPLE_BLOB_MAX);
    size_t *len = (size_t *)malloc((size_t)n * (size_t)k * sizeof *len);
    for (int i = 0; i < n * k; i++) len[i] = oob_get_blob(fd[i / k], b + (size_t)i * EXAMPLE_BLOB_MAX, EXAMPLE_BLOB_MAX);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < n * k; i++) oob_put_blob(fd[r], b + (size_t)i * EXAMPLE_BLOB_MAX, len[i]);
    free(b), free(len);
}

static inline int example_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0..1) of n values, sorting them in place. */
static inline double example_quantile(double *v, size_t n, double q) {
    qsort(v, n, sizeof *v, example_cmp_double);
    return n ? v[(size_t)(q * (double)(n - 1) + 0.5)] : 0;
}
#endif
