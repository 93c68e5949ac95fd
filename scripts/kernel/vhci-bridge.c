/*
 * vhci-bridge: one Linux virtual HCI controller (/dev/vhci, driver hci_vhci) whose far end is a controller
 * reached over TCP in H4 framing (rootcanal's HCI port). Runs inside the kernel test guest
 * (scripts/kernel/guest); standard C and POSIX only.
 *
 *   vhci-bridge [-l LENGTH] HOST PORT   prints "hciN" on standard output once the kernel has made the adapter
 *
 * -l LENGTH reports LE ACL buffers of LENGTH octets to the host instead of the controller's own (the answers to
 * LE Read Buffer Size [v1] and [v2]): rootcanal's default controller has 27-octet LE buffers but forwards ACL
 * packets of any length whole, so bulk-data scenarios run with fewer, larger packets (1 MB over L2CAP is about
 * 1,000 packets with 1021-octet buffers, 50,000 with 27, at about 20 a second under emulation).
 *
 * /dev/vhci takes exactly one whole H4 packet per write and returns one per read. The first packet this
 * program writes is the vendor packet 0xff 0x00, which creates a primary (BR/EDR+LE) controller at once
 * instead of after the driver's one-second timeout; the kernel answers with a vendor packet
 * 0xff OPCODE INDEX_LO INDEX_HI that names the new index and must not reach the controller.
 * Closing /dev/vhci (this program ending, for any reason) unregisters the adapter, as unplugging a dongle does.
 *
 * Duplicate filtering is done here, not by the controller, with a grace after each scan starts (see scan_command
 * and keep_report): a scan the host starts with Filter_Duplicates reaches the controller without it, and this
 * bridge passes every advertising report during the first GRACE_MS after the scan was enabled, then each distinct
 * report (the same advertiser, type and data; the RSSI aside) once more and no more. Linux 6.1 drops the reports
 * that arrive between the Command Complete of the scan enable and the moment its discovery state becomes
 * "finding" (mgmt's start_discovery_complete runs after the request's work); with the controller's own filter the
 * advertiser, heard once in that gap, was never reported again in that window of 10.24 s. Under emulation that gap
 * is about 10 ms, and rootcanal answers a scan request within it: bluetoothd's discovery found nothing in 20 s
 * (cb-tool-bluez; its btmon capture showed both reports 2.5 ms after the Command Complete and 8 ms before
 * mgmt's Discovering event, in each window).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) { if (errno == EINTR) continue; return -1; }
        p += w; n -= (size_t)w;
    }
    return 0;
}

/* Length of the complete H4 packet at the start of buf (type byte included), 0 if more bytes are needed,
 * -1 for an unknown packet type. */
static long h4_length(const unsigned char *buf, size_t have) {
    if (have < 1) return 0;
    switch (buf[0]) {
    case 0x01: return have < 4 ? 0 : 4L + buf[3];                              /* command */
    case 0x02: return have < 5 ? 0 : 5L + (buf[3] | (buf[4] << 8));             /* ACL */
    case 0x03: return have < 4 ? 0 : 4L + buf[3];                              /* SCO */
    case 0x04: return have < 3 ? 0 : 3L + buf[2];                              /* event */
    case 0x05: return have < 5 ? 0 : 5L + ((buf[3] | (buf[4] << 8)) & 0x3fff); /* ISO */
    default: return -1;
    }
}

/* An LE Read Buffer Size [v1] (0x2002) or [v2] (0x2060) Command Complete from the controller, as H4: its
 * LE_ACL_Data_Packet_Length set to `length` when the controller reported LE buffers of its own. */
static void rewrite_le_buffer_size(unsigned char *p, long n, unsigned length) {
    if (n < 10 || p[0] != 0x04 || p[1] != 0x0e) return;
    unsigned opcode = p[4] | (p[5] << 8);
    if ((opcode != 0x2002 && opcode != 0x2060) || p[6] != 0x00) return;
    if ((p[7] | (p[8] << 8)) == 0) return;   /* 0: LE shares the BR/EDR buffers */
    p[7] = length & 0xff;
    p[8] = (length >> 8) & 0xff;
}

/* Duplicate filtering with a grace (see the top of this file). */
#define GRACE_MS 1500
#define SEEN_MAX 512
static int filtering;                 /* the host asked for duplicate filtering in the scan that runs */
static long long scan_enabled_at;     /* when (monotonic ms) */
static unsigned long long seen[SEEN_MAX];
static int seen_count;

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* An LE Set Scan Enable (0x200c) or LE Set Extended Scan Enable (0x2042) from the host, as H4: a scan that
 * enables duplicate filtering goes to the controller without it, and the bridge filters (keep_report). */
static void scan_command(unsigned char *p, long n) {
    if (n < 6 || p[0] != 0x01) return;
    unsigned opcode = p[1] | (p[2] << 8);
    if (opcode != 0x200c && opcode != 0x2042) return;
    if (p[4] == 0x01) {
        filtering = p[5] != 0x00;
        p[5] = 0x00;
        scan_enabled_at = now_ms();
        seen_count = 0;
    } else {
        filtering = 0;
    }
}

/* Whether an event from the controller goes on to the host: an LE Advertising Report or LE Extended Advertising
 * Report with one report, during a scan that filters duplicates, passes during the grace and then once per
 * distinct report (FNV-1a of the event with its RSSI and TX power left out). Past SEEN_MAX distinct reports the
 * list starts again, as a controller whose filter is full reports duplicates. */
static int keep_report(const unsigned char *p, long n) {
    if (!filtering || n < 5 || p[0] != 0x04 || p[1] != 0x3e || p[4] != 1) return 1;
    long rssi = -1, tx = -1;
    if (p[3] == 0x02) rssi = n - 1;                       /* legacy: RSSI is the last octet */
    else if (p[3] == 0x0d && n >= 29) { tx = 17; rssi = 18; }
    else return 1;
    if (now_ms() - scan_enabled_at < GRACE_MS) return 1;
    unsigned long long h = 1469598103934665603ULL;
    for (long i = 0; i < n; i++) {
        if (i == rssi || i == tx) continue;
        h = (h ^ p[i]) * 1099511628211ULL;
    }
    for (int i = 0; i < seen_count; i++) if (seen[i] == h) return 0;
    if (seen_count == SEEN_MAX) seen_count = 0;
    seen[seen_count++] = h;
    return 1;
}

int main(int argc, char **argv) {
    unsigned le_length = 0;
    if (argc == 5 && strcmp(argv[1], "-l") == 0) {
        le_length = (unsigned)atoi(argv[2]);
        if (le_length < 27 || le_length > 0xffff) { fprintf(stderr, "vhci-bridge: -l takes 27 to 65535\n"); return 64; }
        argv += 2; argc -= 2;
    }
    if (argc != 3) { fprintf(stderr, "usage: vhci-bridge [-l LENGTH] HOST PORT\n"); return 64; }
    signal(SIGPIPE, SIG_IGN);
    /* Every descriptor beyond the standard three is closed: the bridge outlives whoever started it, and a
     * descriptor it inherited would stay open as long as it runs. Foundation's Process notices its child's end
     * when a socket the child inherited closes: a test that ran a shell helper plugging a controller waited
     * for this bridge to end, i.e. forever. */
    long maxfd = sysconf(_SC_OPEN_MAX);
    if (maxfd < 0 || maxfd > 65536) maxfd = 65536;
    for (int fd = 3; fd < maxfd; fd++) close(fd);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)atoi(argv[2]));
    if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) { fprintf(stderr, "vhci-bridge: bad address %s\n", argv[1]); return 64; }
    int tcp = -1;
    for (int attempt = 0; attempt < 300; attempt++) {   /* rootcanal may still be starting: up to 30 s */
        tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (tcp < 0) { perror("vhci-bridge: socket"); return 1; }
        if (connect(tcp, (struct sockaddr *)&sa, sizeof sa) == 0) break;
        close(tcp); tcp = -1;
        usleep(100000);
    }
    if (tcp < 0) { fprintf(stderr, "vhci-bridge: cannot connect to %s:%s\n", argv[1], argv[2]); return 1; }
    int one = 1;
    setsockopt(tcp, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    int vhci = open("/dev/vhci", O_RDWR | O_CLOEXEC);
    if (vhci < 0) { perror("vhci-bridge: /dev/vhci"); return 1; }
    const unsigned char create[2] = { 0xff, 0x00 };
    if (write_all(vhci, create, sizeof create) < 0) { perror("vhci-bridge: create"); return 1; }

    static unsigned char in[65536 + 8], out[65536 + 8];
    size_t have = 0;
    struct pollfd fds[2] = { { vhci, POLLIN, 0 }, { tcp, POLLIN, 0 } };
    for (;;) {
        if (poll(fds, 2, -1) < 0) { if (errno == EINTR) continue; perror("vhci-bridge: poll"); return 1; }
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = read(vhci, out, sizeof out);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) { fprintf(stderr, "vhci-bridge: /dev/vhci closed\n"); return 1; }
            if (out[0] == 0xff) {                      /* the driver's own vendor packet: names the index */
                if (n >= 4) { printf("hci%d\n", out[2] | (out[3] << 8)); fflush(stdout); }
                continue;
            }
            scan_command(out, n);
            if (write_all(tcp, out, (size_t)n) < 0) { fprintf(stderr, "vhci-bridge: controller connection lost\n"); return 1; }
        }
        if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = read(tcp, in + have, sizeof in - have);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) { fprintf(stderr, "vhci-bridge: controller closed the connection\n"); return 1; }
            have += (size_t)n;
            for (;;) {
                long len = h4_length(in, have);
                if (len < 0) { fprintf(stderr, "vhci-bridge: unknown H4 packet type 0x%02x\n", in[0]); return 1; }
                if (len == 0 || (size_t)len > have) break;
                if (le_length) rewrite_le_buffer_size(in, len, le_length);
                if (keep_report(in, len) && write_all(vhci, in, (size_t)len) < 0) {
                    /* ENXIO: the kernel has the adapter down (closed, or between a user channel's close and the
                     * next open) and drops what the controller sends, as it would from a real one; rootcanal
                     * still sends late events then. Anything else ends the bridge. */
                    if (errno != ENXIO) { perror("vhci-bridge: write /dev/vhci"); return 1; }
                }
                memmove(in, in + len, have - (size_t)len);
                have -= (size_t)len;
            }
        }
    }
}
