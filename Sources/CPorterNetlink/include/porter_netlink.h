#ifndef PORTER_NETLINK_H
#define PORTER_NETLINK_H

/* The kernel's announcements of network changes, for tasks waiting for connectivity
 * (PorterSession) and porterd's retries: no IPC, no D-Bus. */

/* A netlink socket that hears the kernel announce links, addresses and routes coming
 * and going (rtnetlink). Readable whenever the network changed; -1 on error. */
int porter_netlink_route_watch(void);
/* Reads and discards what the watch socket holds, waiting up to `timeout_ms` for it;
 * 1 when something arrived, 0 on timeout, -1 on error. */
int porter_netlink_route_wait(int fd, int timeout_ms);

#endif
