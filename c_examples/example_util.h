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
#include <sys/socket.h>
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

/* An engine on `provider`, bound to 127.0.0.1, whose workers idle as
 * `idle` says (FABRICLIB_IDLE_*). */
static inline fabriclib_engine *example_engine(const char *provider, fabriclib_idle idle) {
    fabriclib_config *cfg;
    fabriclib_engine *e;
    CHECK(fabriclib_config_new(&cfg));
    CHECK(fabriclib_config_set_provider(cfg, provider));
    CHECK(fabriclib_config_set_bind_address(cfg, "127.0.0.1"));
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

static inline struct sockaddr_in oob_addr(int port) {
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sa;
}

/* Listens on 127.0.0.1:port and returns the first connection (*listener: close it after). */
static inline int oob_accept(int port, int *listener) {
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = oob_addr(port);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 1)) { perror("oob bind"); exit(1); }
    *listener = ls;
    return accept(ls, NULL, NULL);
}

/* Connects to 127.0.0.1:port, retrying for up to 10 s while the other side starts. */
static inline int oob_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = oob_addr(port);
    for (int tries = 0; connect(fd, (struct sockaddr *)&sa, sizeof sa); tries++) {
        if (tries > 1000) { perror("oob connect"); exit(1); }
        usleep(10000);
    }
    return fd;
}
#endif
