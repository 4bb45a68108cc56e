#define _GNU_SOURCE
#include "porter_netlink.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <unistd.h>

int porter_netlink_route_watch(void) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) return -1;
    struct sockaddr_nl a;
    memset(&a, 0, sizeof a);
    a.nl_family = AF_NETLINK;
    a.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int porter_netlink_route_wait(int fd, int timeout_ms) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    int n = poll(&p, 1, timeout_ms);
    if (n <= 0) return n;
    char buf[8192];
    int got = 0;
    /* Drain: one change often comes as several messages. ENOBUFS: the kernel dropped
       messages for want of room, so something changed that we did not hear. */
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r > 0) { got = 1; continue; }
        if (r < 0 && errno == ENOBUFS) { got = 1; continue; }
        break;
    }
    return got;
}
